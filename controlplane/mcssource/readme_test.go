package mcssource

import (
	"context"
	"regexp"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/cache"

	"github.com/meshdns/meshdns/internal/readmetest"
)

// absent is a Client whose API server never serves ServiceImports.
type absent struct{}

func (absent) Present(context.Context) (bool, error)     { return false, nil }
func (absent) ServiceImports() cache.ListerWatcher       { return nil }
func (absent) EndpointSlices(string) cache.ListerWatcher { return nil }

// TestREADMEMetrics: the README's Metrics table lists exactly the metrics
// the source registers.
func TestREADMEMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := New(Config{Client: absent{}, Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var registered []string
	for _, mf := range mfs {
		registered = append(registered, mf.GetName())
	}
	readmetest.MetricsDocumented(t, "README.md", regexp.MustCompile("(?m)^\\| `(meshdns_[a-z_]+)`"), registered)
}
