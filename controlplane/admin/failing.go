package admin

import (
	"net/http"
	"strings"

	"github.com/meshdns/meshdns/controlplane/server"
)

// PodFailing is one agent's last failing-names report, as /debug/failing
// lists it.
type PodFailing struct {
	Namespace  string `json:"namespace"`
	Pod        string `json:"pod"`
	InstanceID string `json:"instanceID"`
	server.FailingReport
}

// failing serves the last failing-names report of every connected agent
// that sent one, by namespace and pod: ?namespace= keeps one namespace,
// ?name= the names equal to it (with or without the trailing dot), ?rcode=
// one response code (NXDOMAIN, SERVFAIL, REFUSED); a pod left without
// names is left out.
func (h *handler) failing(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ns, rcode := q.Get("namespace"), strings.ToUpper(q.Get("rcode"))
	name := strings.ToLower(q.Get("name"))
	if name != "" && !strings.HasSuffix(name, ".") {
		name += "."
	}
	filtered := name != "" || rcode != ""
	out := []PodFailing{}
	for _, a := range h.cfg.Agents.Agents() {
		if a.Failing == nil || (ns != "" && a.Namespace != ns) {
			continue
		}
		rep := *a.Failing
		if filtered {
			rep.Names = nil
			for _, n := range a.Failing.Names {
				if (name == "" || n.Name == name) && (rcode == "" || n.Rcode == rcode) {
					rep.Names = append(rep.Names, n)
				}
			}
			if len(rep.Names) == 0 {
				continue
			}
		}
		out = append(out, PodFailing{Namespace: a.Namespace, Pod: a.Pod, InstanceID: a.InstanceID, FailingReport: rep})
	}
	writeJSON(w, out)
}
