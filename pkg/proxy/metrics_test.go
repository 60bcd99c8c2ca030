package proxy

import (
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshdns/meshdns/internal/readmetest"
)

func TestMetricsCount(t *testing.T) {
	reg := prometheus.NewRegistry()
	// www.example.org is in the cache; other names wait for the Resolver.
	cfg := testConfig(&cacheOnly{fakeResolver: &fakeResolver{answer: staticAnswer(t, "A 192.0.2.1")}})
	cfg.Registerer = reg
	s := startServer(t, cfg)
	s.SetTable(demoTable(t))
	h := s.Handler()
	for range 3 {
		exchange(t, "udp", udpAddr(s), newQuery("web.demo.svc.cluster.local.", dns.TypeA))
	}
	exchange(t, "tcp", tcpAddr(s), newQuery("nope.demo.svc.cluster.local.", dns.TypeA))
	exchange(t, "udp", udpAddr(s), newQuery("www.example.org.", dns.TypeA))
	exchange(t, "udp", udpAddr(s), newQuery("big.demo.svc.cluster.local.", dns.TypeAAAA))
	rawExchange(t, udpAddr(s), []byte{1, 2, 3}, 100*time.Millisecond)

	tests := []struct {
		name string
		c    prometheus.Collector
		want float64
	}{
		{name: "table answers over udp", c: h.m.requestsVec.WithLabelValues("udp", "A", "NOERROR", "table"), want: 3},
		{name: "nxdomain over tcp", c: h.m.requestsVec.WithLabelValues("tcp", "A", "NXDOMAIN", "table"), want: 1},
		{name: "forwarded, fake counts as cache", c: h.m.requestsVec.WithLabelValues("udp", "A", "NOERROR", "cache"), want: 1},
		{name: "truncated", c: h.m.truncatedVec.WithLabelValues("udp"), want: 1},
		{name: "dropped short packet", c: h.m.droppedVec.WithLabelValues("udp", "malformed"), want: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := testutil.ToFloat64(tc.c); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	// Table answers and cache hits on the reader are not timed; a query
	// that waits for the Resolver (Serve blocks) is.
	if n, err := testutil.GatherAndCount(reg, "meshdns_dns_request_duration_seconds"); err != nil || n != 0 {
		t.Errorf("duration histogram series before a waiting query = %d, %v; want 0", n, err)
	}
	pkt, err := newQuery("other.example.org.", dns.TypeA).Pack()
	if err != nil {
		t.Fatal(err)
	}
	if h.Serve(t.Context(), nil, pkt, UDP) == nil {
		t.Fatal("no reply")
	}
	if n, err := testutil.GatherAndCount(reg, "meshdns_dns_request_duration_seconds"); err != nil || n != 1 {
		t.Errorf("duration histogram series = %d, %v; want 1", n, err)
	}
	if got := gaugeValue(t, reg, "meshdns_dns_answer_cache_entries"); got < 3 {
		t.Errorf("answer cache entries = %v, want >= 3", got)
	}
}

// gaugeValue returns the value of the unlabelled gauge name in reg.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// registeredNames returns the names of every metric NewHandler registers.
func registeredNames(t *testing.T) []string {
	t.Helper()
	reg := prometheus.NewRegistry()
	cfg := testConfig(&fakeResolver{})
	cfg.Registerer = reg
	h, err := NewHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Touch every vector so Gather reports it.
	h.m.observe(UDP, dns.TypeA, 0, srcCache, true, time.Millisecond)
	h.m.drop(UDP, dropMalformed)
	h.m.truncate(UDP)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	sort.Strings(names)
	return names
}

func TestMetricNames(t *testing.T) {
	for _, n := range registeredNames(t) {
		t.Run(n, func(t *testing.T) {
			if !strings.HasPrefix(n, "meshdns_dns_") {
				t.Errorf("%s lacks the meshdns_dns_ prefix", n)
			}
			if strings.Contains(n, "duration") && !strings.HasSuffix(n, "_seconds") {
				t.Errorf("duration %s does not end in _seconds", n)
			}
		})
	}
}

// The README's Metrics section lists exactly the registered metrics.
func TestREADMEListsMetrics(t *testing.T) {
	readmetest.MetricsDocumented(t, "README.md", regexp.MustCompile("`(meshdns_[a-z_]+)`"), registeredNames(t))
}
