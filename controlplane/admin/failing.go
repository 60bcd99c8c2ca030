package admin

import (
	"net/http"
	"strings"

	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/internal/adminhttp"
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
// that sent one, by namespace and pod (see Failing for the query).
func (h *handler) failing(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	adminhttp.WriteJSON(w, Failing(h.cfg.Agents.Agents(), q.Get("namespace"), q.Get("name"), q.Get("rcode")))
}

// Failing returns the reports of agents, sorted as given: namespace keeps
// one namespace; name the names equal to it (any case, with or without
// the trailing dot); rcode one response code (NXDOMAIN, SERVFAIL,
// REFUSED, any case). With name or rcode, a pod left without names is
// left out. "" filters nothing.
func Failing(agents []server.AgentInfo, namespace, name, rcode string) []PodFailing {
	rcode, name = strings.ToUpper(rcode), strings.ToLower(name)
	if name != "" && !strings.HasSuffix(name, ".") {
		name += "."
	}
	filtered := name != "" || rcode != ""
	out := []PodFailing{}
	for _, a := range agents {
		if a.Failing == nil || (namespace != "" && a.Namespace != namespace) {
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
	return out
}
