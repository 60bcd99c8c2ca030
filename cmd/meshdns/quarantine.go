package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/controlplane/server"
)

// The tables agents reported crashing on, as the control plane's
// /debug/quarantine lists them (controlplane/README.md, "Poisoned
// versions"), for `meshdns status` and `meshdns analyze`.

// controlPlaneSelector labels the control plane's pods (as status's
// --selector defaults to).
const controlPlaneSelector = "app.kubernetes.io/name=meshdns-controlplane"

// fetchQuarantine reads /debug/quarantine of the control plane whose
// admin URL is base. A control plane without it (an older one: 404) has
// nothing quarantined.
func fetchQuarantine(ctx context.Context, client *http.Client, base string) ([]server.QuarantineInfo, error) {
	url := strings.TrimSuffix(base, "/") + "/debug/quarantine"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	res, err := client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", url, err)
	}
	defer res.Body.Close()
	if res.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	body, err := io.ReadAll(io.LimitReader(res.Body, 16<<20))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", url, err)
	}
	if res.StatusCode != http.StatusOK {
		first, _, _ := strings.Cut(strings.TrimSpace(string(body)), "\n")
		return nil, fmt.Errorf("get %s: %s: %s", url, res.Status, first)
	}
	var qs []server.QuarantineInfo
	if err := json.Unmarshal(body, &qs); err != nil {
		return nil, fmt.Errorf("decode %s: %w", url, err)
	}
	return qs, nil
}

// printQuarantine writes, after the agents, the tables agents reported
// crashing on; nothing when there are none.
func printQuarantine(w io.Writer, qs []server.QuarantineInfo) error {
	if len(qs) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VIEW\tVERSION\tSTATE\tREPORTS\tHELD AT\tSINCE\tREASON")
	for _, q := range qs {
		state, since := "REPORTED", "-"
		if q.Quarantined {
			state = "QUARANTINED"
			since = q.Since.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d/%d\t%s\t%s\t%s\n", viewName(q), q.Version, state, q.Reports, q.Threshold,
			orDash(q.HeldAt), since, orDash(short(q.Reason, 60)))
	}
	return tw.Flush()
}

// viewName names a view: its namespace ("shared" for the view of the
// namespaces without names of their own), with its cluster domain.
func viewName(q server.QuarantineInfo) string {
	ns := q.Namespace
	if ns == "" {
		ns = "shared"
	}
	if q.ClusterDomain == "" {
		return ns
	}
	return ns + "/" + q.ClusterDomain
}

// replicaQuarantine is what one control plane replica quarantined.
type replicaQuarantine struct {
	pod   string
	infos []server.QuarantineInfo
}

// readQuarantine reads /debug/quarantine of every running control plane
// replica in system through the API server's port-forward. A replica it
// cannot read is skipped: analyze checks what it can see (`meshdns status
// --kubeconfig -` names the replicas it cannot reach).
func readQuarantine(ctx context.Context, rc *rest.Config, k *kubeREST, system string) []replicaQuarantine {
	var pods corev1.PodList
	if err := k.list(ctx, k.core, system, "pods", metav1.ListOptions{LabelSelector: controlPlaneSelector}, &pods); err != nil {
		return nil
	}
	var out []replicaQuarantine
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase != corev1.PodRunning {
			continue
		}
		t, err := dialPod(rc, p.Namespace, p.Name)
		if err != nil {
			continue
		}
		port := adminPort(p)
		qs, err := fetchQuarantine(ctx, t.httpClient(port), "http://127.0.0.1:"+strconv.Itoa(port))
		t.Close()
		if err == nil && len(qs) > 0 {
			out = append(out, replicaQuarantine{pod: p.Name, infos: qs})
		}
	}
	return out
}

// checkQuarantine: no control plane replica holds back a table agents
// crashed running, and none was reported below the threshold.
func checkQuarantine(c *cluster) []finding {
	var out []finding
	for _, r := range c.quarantine {
		obj := "Pod " + c.system + "/" + r.pod
		for _, q := range r.infos {
			held := "the other agents get version " + orDash(q.HeldAt) + " meanwhile"
			if q.HeldAt == "" {
				held = "it is the first version the replica built, so it cannot be held back"
			}
			if q.Quarantined {
				out = append(out, finding{codeVersionQuarantined, severityError, obj,
					fmt.Sprintf("name table version %s of view %s is quarantined: %d agents (threshold %d) crashed running it, last %s: %s; %s",
						q.Version, viewName(q), q.Reports, q.Threshold, q.LastAgent, q.Reason, held),
					"find the source change (entries, Services, DNSPolicy) that made it and revert or fix it: the next version lifts the quarantine; meshdns status shows the agents"})
				continue
			}
			out = append(out, finding{codeVersionQuarantined, severityWarning, obj,
				fmt.Sprintf("%d agents (threshold %d) crashed running name table version %s of view %s, last %s: %s",
					q.Reports, q.Threshold, q.Version, viewName(q), q.LastAgent, q.Reason),
				"read the agents' logs (previous container: kubectl logs -p) for why they died"})
		}
	}
	return out
}

// adminURL is an --admin-addr (host:port or a URL) as a URL.
func adminURL(addr string) string {
	if strings.HasPrefix(addr, "http://") || strings.HasPrefix(addr, "https://") {
		return addr
	}
	return "http://" + addr
}
