package kubesource

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"
)

// TestREADMEMetrics: the README's Metrics table lists exactly the metrics
// the source registers, and every name follows the convention.
func TestREADMEMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	src := newSource(t, Config{Client: typed(fake.NewClientset()), Registerer: reg})
	// Vectors without children are not gathered: give them one.
	src.m.events.WithLabelValues("service", "add")
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var registered []string
	for _, mf := range mfs {
		registered = append(registered, mf.GetName())
	}
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	section := string(readme)
	section = section[strings.Index(section, "## Metrics"):]
	section = section[:strings.Index(section, "## Memory")]
	var documented []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(meshdns_[a-z_]+)`").FindAllStringSubmatch(section, -1) {
		documented = append(documented, m[1])
	}
	slices.Sort(registered)
	slices.Sort(documented)
	if diff := cmp.Diff(registered, documented); diff != "" {
		t.Errorf("README metrics (-registered +documented):\n%s", diff)
	}
	name := regexp.MustCompile(`^meshdns_controlplane_kube_[a-z_]+$`)
	for _, n := range registered {
		if !name.MatchString(n) {
			t.Errorf("metric %s does not follow meshdns_controlplane_kube_<name>", n)
		}
	}
}
