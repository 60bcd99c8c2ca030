package upstream

import (
	"regexp"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/meshdns/meshdns/internal/readmetest"
)

// TestMetricsDocumented checks that README.md's Metrics section lists exactly
// the metrics a Resolver registers, and that the names follow the naming rules in docs/design.md.
func TestMetricsDocumented(t *testing.T) {
	_, reg := newTestResolver(t, Config{Upstreams: []string{"127.0.0.1:1"}})
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var registered []string
	for _, mf := range families {
		n := mf.GetName()
		registered = append(registered, n)
		if !strings.HasPrefix(n, "meshdns_upstream_") && !strings.HasPrefix(n, "meshdns_cache_") {
			t.Errorf("metric %s: want prefix meshdns_upstream_ or meshdns_cache_", n)
		}
		if (mf.GetType() == dto.MetricType_COUNTER) != strings.HasSuffix(n, "_total") {
			t.Errorf("metric %s: counters, and only counters, end in _total", n)
		}
		if mf.GetType() == dto.MetricType_HISTOGRAM && !strings.HasSuffix(n, "_seconds") {
			t.Errorf("metric %s: durations end in _seconds", n)
		}
	}
	readmetest.MetricsDocumented(t, "README.md", regexp.MustCompile("(?m)^- `(meshdns_[a-z_]+)"), registered)
}

// TestRegisterTwice: a second Resolver on the same registry fails cleanly
// (duplicate metrics) and leaves the first one's metrics in place.
func TestRegisterTwice(t *testing.T) {
	_, reg := newTestResolver(t, Config{Upstreams: []string{"127.0.0.1:1"}})
	if _, err := New(Config{Upstreams: []string{"127.0.0.1:1"}, Registerer: reg}); err == nil {
		t.Fatal("second Resolver on one registry: no error")
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(families) != 10 {
		t.Errorf("%d metric families after the failed New, want the first Resolver's 10", len(families))
	}
}
