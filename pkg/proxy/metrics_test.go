package proxy

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/readmetest"
)

func TestMetricsCount(t *testing.T) {
	reg := newTestRegistry()
	// www.example.org is in the cache; other names wait for the Resolver.
	cfg := testConfig(&cacheOnly{fakeResolver: &fakeResolver{answer: staticAnswer(t, "A 192.0.2.1")}})
	cfg.Registry = reg
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
		name   string
		metric string
		labels []string
		want   float64
	}{
		{name: "table answers over udp", metric: "meshdns_dns_requests_total", labels: []string{"udp", "A", "NOERROR", "table"}, want: 3},
		{name: "nxdomain over tcp", metric: "meshdns_dns_requests_total", labels: []string{"tcp", "A", "NXDOMAIN", "table"}, want: 1},
		{name: "forwarded, fake counts as cache", metric: "meshdns_dns_requests_total", labels: []string{"udp", "A", "NOERROR", "cache"}, want: 1},
		{name: "truncated", metric: "meshdns_dns_truncated_responses_total", labels: []string{"udp"}, want: 1},
		{name: "dropped short packet", metric: "meshdns_dns_dropped_total", labels: []string{"udp", "malformed"}, want: 1},
		{name: "unused series", metric: "meshdns_dns_dropped_total", labels: []string{"tcp", "malformed"}, want: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := reg.value(t, tc.metric, tc.labels...); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	// Table answers and cache hits on the reader are not timed; a query
	// that waits for the Resolver (Serve blocks) is.
	if n := len(reg.series(t, "meshdns_dns_request_duration_seconds")); n != 0 {
		t.Errorf("duration histogram series before a waiting query = %d; want 0", n)
	}
	pkt, err := newQuery("other.example.org.", dns.TypeA).Pack()
	if err != nil {
		t.Fatal(err)
	}
	if h.Serve(t.Context(), nil, pkt, UDP) == nil {
		t.Fatal("no reply")
	}
	if n := len(reg.series(t, "meshdns_dns_request_duration_seconds")); n != 1 {
		t.Errorf("duration histogram series = %d; want 1", n)
	}
	if c := reg.series(t, "meshdns_dns_request_duration_seconds")["udp,cache"].Counts; len(c) != 11 || c[10] != 1 {
		t.Errorf("duration histogram counts %v, want one observation", c)
	}
	// web was asked three times, so its answer is kept; the others once.
	if got := reg.value(t, "meshdns_dns_answer_cache_entries"); got < 1 {
		t.Errorf("answer cache entries = %v, want >= 1", got)
	}
}

// registeredNames returns the names of every metric NewHandler registers.
func registeredNames(t *testing.T) []string {
	t.Helper()
	reg := newTestRegistry()
	cfg := testConfig(&fakeResolver{})
	cfg.Registry = reg
	if _, err := NewHandler(cfg); err != nil {
		t.Fatal(err)
	}
	return reg.names()
}

func TestMetricNames(t *testing.T) {
	for _, n := range registeredNames(t) {
		t.Run(n, func(t *testing.T) {
			if !strings.HasPrefix(n, "meshdns_dns_") && !strings.HasPrefix(n, "meshdns_policy_") {
				t.Errorf("%s lacks the meshdns_dns_ or meshdns_policy_ prefix", n)
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
