package webhook

import (
	"regexp"
	"sort"
	"testing"

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
