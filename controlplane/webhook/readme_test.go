package webhook

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/meshdns/meshdns/internal/readmetest"
)

// TestREADMEMetrics: the README's Metrics section lists exactly the
// metrics the package registers, and every name follows the convention.
func TestREADMEMetrics(t *testing.T) {
	_, reg := newTestWebhook(t, Config{})
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	registered := map[string]bool{}
	for _, mf := range mfs {
		registered[mf.GetName()] = true
	}
	// Vectors without children are not gathered; list them by name.
	for _, n := range []string{"meshdns_webhook_requests_total", "meshdns_webhook_skipped_total", "meshdns_webhook_template_reloads_total"} {
		registered[n] = true
	}
	readmetest.MetricsDocumented(t, "README.md", regexp.MustCompile("`(meshdns_[a-z_]+)`"), keys(registered))
	name := regexp.MustCompile(`^meshdns_webhook_[a-z_]+(_total|_seconds)$`)
	for n := range registered {
		if !name.MatchString(n) {
			t.Errorf("metric %s does not follow meshdns_webhook_<name>_<unit>", n)
		}
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestREADMEAgentShape: the README's description of the injected sidecar
// is what the default template injects: its arguments, and each probe on
// the port the kubelet really calls.
func TestREADMEAgentShape(t *testing.T) {
	data, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := strings.Join(strings.Fields(string(data)), " ")
	tmpl := DefaultTemplate()
	c := tmpl.agentContainer()
	args := strings.Join(c.Args, " ")
	args = strings.Replace(args, tmpl.ControlPlane, "<addr>", 1)
	if !strings.Contains(readme, "`"+args+"`") {
		t.Errorf("README does not show the agent's arguments as injected: `%s`", args)
	}
	for name, p := range map[string]*corev1.Probe{"Readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		if p == nil {
			t.Errorf("no %s probe injected", name)
			continue
		}
		port := p.HTTPGet.Port.IntValue()
		want := fmt.Sprintf("%s probe: `GET %s` on the probe port (%d", name, p.HTTPGet.Path, port)
		if port != int(tmpl.ProbePort) || !strings.Contains(readme, want) {
			t.Errorf("README should say %q (probe on port %d)", want, port)
		}
	}
}
