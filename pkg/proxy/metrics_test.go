package proxy

import (
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/internal/readmetest"
)

func TestMetricsCount(t *testing.T) {
	reg := metrics.NewRegistry()
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
		name string
		c    *metrics.Counter
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
			if got := tc.c.Value(); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
	// Table answers and cache hits on the reader are not timed; a query
	// that waits for the Resolver (Serve blocks) is.
	if n := seriesCount(t, reg, "meshdns_dns_request_duration_seconds"); n != 0 {
		t.Errorf("duration histogram series before a waiting query = %d; want 0", n)
	}
	pkt, err := newQuery("other.example.org.", dns.TypeA).Pack()
	if err != nil {
		t.Fatal(err)
	}
	if h.Serve(t.Context(), nil, pkt, UDP) == nil {
		t.Fatal("no reply")
	}
	if n := seriesCount(t, reg, "meshdns_dns_request_duration_seconds"); n != 1 {
		t.Errorf("duration histogram series = %d; want 1", n)
	}
	// web was asked three times, so its answer is kept; the others once.
	if got := gaugeValue(t, reg, "meshdns_dns_answer_cache_entries"); got < 1 {
		t.Errorf("answer cache entries = %v, want >= 1", got)
	}
}

// scrape returns the sample lines of reg's text exposition.
func scrape(t *testing.T, reg *metrics.Registry) []string {
	t.Helper()
	var b strings.Builder
	if err := reg.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for l := range strings.SplitSeq(b.String(), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines
}

// seriesCount returns how many series the histogram name has in reg.
func seriesCount(t *testing.T, reg *metrics.Registry, name string) int {
	t.Helper()
	n := 0
	for _, l := range scrape(t, reg) {
		if strings.HasPrefix(l, name+"_count") {
			n++
		}
	}
	return n
}

// gaugeValue returns the value of the unlabelled gauge name in reg.
func gaugeValue(t *testing.T, reg *metrics.Registry, name string) float64 {
	t.Helper()
	for _, l := range scrape(t, reg) {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatal(err)
			}
			return f
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// registeredNames returns the names of every metric NewHandler registers.
func registeredNames(t *testing.T) []string {
	t.Helper()
	reg := metrics.NewRegistry()
	cfg := testConfig(&fakeResolver{})
	cfg.Registry = reg
	if _, err := NewHandler(cfg); err != nil {
		t.Fatal(err)
	}
	return readmetest.Registered(reg)
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
