package kubesource

import (
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshdns/meshdns/internal/readmetest"
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
	readmetest.MetricsDocumented(t, "README.md", regexp.MustCompile("(?m)^\\| `(meshdns_[a-z_]+)`"), registered)
	name := regexp.MustCompile(`^meshdns_controlplane_kube_[a-z_]+$`)
	for _, n := range registered {
		if !name.MatchString(n) {
			t.Errorf("metric %s does not follow meshdns_controlplane_kube_<name>", n)
		}
	}
}
