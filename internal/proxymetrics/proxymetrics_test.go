package proxymetrics

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/internal/readmetest"
	"github.com/meshdns/meshdns/pkg/proxy"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// failingResolver answers nothing: every forwarded query is SERVFAIL
// after waiting for it, so it is timed.
type failingResolver struct{}

func (failingResolver) AppendCached(dst, _, _ []byte, _ *upstream.Probe) ([]byte, upstream.Source, bool) {
	return dst, upstream.SourceCache, false
}

func (failingResolver) Resolve(context.Context, []byte, []byte, []byte, *upstream.Probe) ([]byte, upstream.Source, error) {
	return nil, upstream.SourceUpstream, net.ErrClosed
}

func (failingResolver) Exchange(context.Context, dns.Question) (*dns.Msg, upstream.Source, error) {
	return nil, upstream.SourceUpstream, net.ErrClosed
}

// A Handler's metrics reach an internal/metrics registry with their
// names, types and lint-clean names, and its text exposition carries the
// counts and the histogram of what the Handler served.
func TestHandlerOnRegistry(t *testing.T) {
	reg := metrics.NewRegistry()
	h, err := proxy.NewHandler(proxy.Config{Resolver: failingResolver{}, Registry: Registry(reg)})
	if err != nil {
		t.Fatal(err)
	}
	readmetest.CheckNames(t, reg)
	want := []string{
		"meshdns_dns_answer_cache_entries", "meshdns_dns_answer_duration_seconds", "meshdns_dns_dropped_total",
		"meshdns_dns_query_log_lines_total", "meshdns_dns_request_duration_seconds", "meshdns_dns_requests_total",
		"meshdns_dns_response_size_bytes", "meshdns_dns_tcp_connections", "meshdns_dns_truncated_responses_total",
		"meshdns_policy_decisions_total",
	}
	if got := readmetest.Registered(reg); !slices.Equal(got, want) {
		t.Errorf("registered %v, want %v", got, want)
	}
	q := new(dns.Msg)
	q.SetQuestion("www.example.org.", dns.TypeA)
	pkt, err := q.Pack()
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if r := h.Serve(t.Context(), nil, pkt, proxy.UDP); len(r) < 4 || r[3]&0xf != dns.RcodeServerFailure {
			t.Fatalf("reply %x, want SERVFAIL", r)
		}
	}
	h.Serve(t.Context(), nil, []byte{1, 2, 3}, proxy.UDP) // dropped
	var b strings.Builder
	if err := reg.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, line := range []string{
		"# TYPE meshdns_dns_requests_total counter",
		`meshdns_dns_requests_total{protocol="udp",qtype="A",rcode="SERVFAIL",source="upstream"} 2`,
		"# TYPE meshdns_dns_request_duration_seconds histogram",
		`meshdns_dns_request_duration_seconds_count{protocol="udp",source="upstream"} 2`,
		`meshdns_dns_request_duration_seconds_bucket{protocol="udp",source="upstream",le="+Inf"} 2`,
		`meshdns_dns_dropped_total{protocol="udp",reason="malformed"} 1`,
		"# TYPE meshdns_dns_tcp_connections gauge",
		"meshdns_dns_tcp_connections 0",
	} {
		if !strings.Contains(text, line+"\n") {
			t.Errorf("exposition lacks %q:\n%s", line, text)
		}
	}
	// A family never used writes no series.
	if strings.Contains(text, "meshdns_dns_truncated_responses_total{") {
		t.Errorf("truncated responses written before any:\n%s", text)
	}
	// The same names twice fail the second Handler.
	_, err = proxy.NewHandler(proxy.Config{Resolver: failingResolver{}, Registry: Registry(reg)})
	if !errors.Is(err, metrics.ErrDuplicate) {
		t.Errorf("second Handler on the registry: %v, want ErrDuplicate", err)
	}
}
