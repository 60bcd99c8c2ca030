package agent

import (
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshdns/meshdns/agent/discovery"
	"github.com/meshdns/meshdns/internal/readmetest"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// descRecorder is a Registerer that keeps the metric names registered.
type descRecorder struct{ names map[string]bool }

var fqName = regexp.MustCompile(`fqName: "([^"]+)"`)

func (r *descRecorder) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 16)
	go func() { c.Describe(ch); close(ch) }()
	for d := range ch {
		if m := fqName.FindStringSubmatch(d.String()); m != nil {
			r.names[m[1]] = true
		}
	}
	return nil
}

func (r *descRecorder) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		r.Register(c)
	}
}

func (r *descRecorder) Unregister(prometheus.Collector) bool { return true }

// TestMetricsDocumented checks that the README's Metrics section lists
// exactly the metrics this package (the iptables check's included) and
// agent/discovery register, and that their names follow the naming rules in docs/design.md.
func TestMetricsDocumented(t *testing.T) {
	rec := &descRecorder{names: map[string]bool{}}
	if _, err := newMetrics(rec); err != nil {
		t.Fatal(err)
	}
	if _, err := newIPTablesMetrics(rec, true); err != nil {
		t.Fatal(err)
	}
	if _, err := discovery.New(discovery.Config{
		Addrs:      []string{"127.0.0.1:1"},
		OnTable:    func(string, *meshdnsv1.NameTable) error { return nil },
		Registerer: rec,
	}); err != nil {
		t.Fatal(err)
	}
	var registered []string
	for n := range rec.names {
		registered = append(registered, n)
		if !strings.HasPrefix(n, "meshdns_agent_") && !strings.HasPrefix(n, "meshdns_discovery_") && !strings.HasPrefix(n, "meshdns_iptables_") {
			t.Errorf("metric %s lacks the meshdns_agent_, meshdns_discovery_ or meshdns_iptables_ prefix", n)
		}
	}
	readmetest.MetricsDocumented(t, "README.md", regexp.MustCompile("`(meshdns_(?:agent|discovery|iptables)_[a-z_]+)"), registered)
}
