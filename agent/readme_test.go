package agent

import (
	"regexp"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/agent/discovery"
	"github.com/meshdns/meshdns/agent/ingest"
	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/internal/readmetest"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// TestMetricsDocumented checks that the README's Metrics section lists
// exactly the metrics this package (the iptables check's included),
// agent/ingest and agent/discovery register, and that their names follow the naming rules in docs/design.md.
func TestMetricsDocumented(t *testing.T) {
	reg := meshmetrics.NewRegistry()
	if _, err := newMetrics(reg); err != nil {
		t.Fatal(err)
	}
	if _, err := newIPTablesMetrics(reg, true); err != nil {
		t.Fatal(err)
	}
	tap, err := newDnstapTap(Config{Dnstap: "unix:///nonexistent.sock"})
	if err != nil {
		t.Fatal(err)
	}
	if err := registerDnstap(reg, tap.w); err != nil {
		t.Fatal(err)
	}
	if _, err := ingest.New(ingest.Config[settings]{Publish: func(*served) {}, Swap: func(*nametable.Table) {}, Registry: reg}); err != nil {
		t.Fatal(err)
	}
	if _, err := discovery.New(discovery.Config{
		Addrs:    []string{"127.0.0.1:1"},
		Apply:    func(*discovery.Version) error { return nil },
		Registry: reg,
	}); err != nil {
		t.Fatal(err)
	}
	registered := readmetest.Registered(reg)
	for _, n := range registered {
		if !strings.HasPrefix(n, "meshdns_agent_") && !strings.HasPrefix(n, "meshdns_discovery_") && !strings.HasPrefix(n, "meshdns_iptables_") {
			t.Errorf("metric %s lacks the meshdns_agent_, meshdns_discovery_ or meshdns_iptables_ prefix", n)
		}
	}
	readmetest.CheckNames(t, reg)
	readmetest.MetricsDocumented(t, "README.md", regexp.MustCompile("`(meshdns_(?:agent|discovery|iptables)_[a-z_]+)"), registered)
}
