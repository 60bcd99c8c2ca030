package upstream

import (
	"regexp"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/internal/proxymetrics"
	"github.com/meshdns/meshdns/internal/readmetest"
)

// TestMetricsDocumented checks that README.md's Metrics section lists exactly
// the metrics a Resolver registers, and that the names follow the naming rules in docs/design.md.
func TestMetricsDocumented(t *testing.T) {
	_, reg := newTestResolver(t, Config{Upstreams: []string{"127.0.0.1:1"}})
	registered := readmetest.Registered(reg)
	for _, n := range registered {
		if !strings.HasPrefix(n, "meshdns_upstream_") && !strings.HasPrefix(n, "meshdns_cache_") {
			t.Errorf("metric %s: want prefix meshdns_upstream_ or meshdns_cache_", n)
		}
	}
	readmetest.CheckNames(t, reg)
	readmetest.MetricsDocumented(t, "README.md", regexp.MustCompile("(?m)^- `(meshdns_[a-z_]+)"), registered)
}

// TestRegisterTwice: a second Resolver on the same registry fails cleanly
// (duplicate metrics) and leaves the first one's metrics in place.
func TestRegisterTwice(t *testing.T) {
	_, reg := newTestResolver(t, Config{Upstreams: []string{"127.0.0.1:1"}})
	if _, err := New(Config{Upstreams: []string{"127.0.0.1:1"}, Registry: proxymetrics.Registry(reg)}); err == nil {
		t.Fatal("second Resolver on one registry: no error")
	}
	if n := len(reg.Names()); n != 12 {
		t.Errorf("%d metric families after the failed New, want the first Resolver's 12", n)
	}
}
