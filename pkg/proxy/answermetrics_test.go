package proxy

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/proxy/observe"
)

// infBucket is the +Inf bucket of meshdns_dns_answer_duration_seconds:
// its cumulative count is every answer counted.
const infBucket = 13

// Sampled timing over real sockets: one reader, so its 1-in-16 count is
// exact, and the weighted histogram counts every answer.
func TestAnswerDurationSampled(t *testing.T) {
	reg := newTestRegistry()
	cfg := testConfig(&fakeResolver{answer: staticAnswer(t, "A 192.0.2.1")})
	cfg.Registry, cfg.UDPSockets = reg, 1
	s := startServer(t, cfg)
	s.SetTable(demoTable(t))
	const n = 4 * observe.TimeEvery
	for range n {
		exchange(t, "udp", udpAddr(s), newQuery("web.demo.svc.cluster.local.", dns.TypeA))
	}
	for range 3 {
		exchange(t, "udp", udpAddr(s), newQuery("nope.demo.svc.cluster.local.", dns.TypeA))
	}
	exchange(t, "udp", udpAddr(s), newQuery("www.example.org.", dns.TypeA))

	dur := reg.series(t, "meshdns_dns_answer_duration_seconds")
	table := dur["udp,table,noerror"]
	if got := table.Counts[infBucket]; got != n {
		t.Errorf("table answers counted %d, want %d (weighted samples)", got, n)
	}
	if table.Sum <= 0 {
		t.Errorf("table answers' duration sum %v, want > 0", table.Sum)
	}
	// The 4 other answers on the same reader take ticks n+1..n+4: none
	// is the 16th, so the table NXDOMAINs are not sampled; the forwarded
	// one is timed all the same (the fake counts as a cache source).
	if _, ok := dur["udp,table,nxdomain"]; ok {
		t.Errorf("nxdomain series present, want none sampled: %v", dur)
	}
	if got := dur["udp,cache,noerror"].Counts; len(got) == 0 || got[infBucket] != 1 {
		t.Errorf("forwarded answer counts %v, want one timed", got)
	}
	size := reg.series(t, "meshdns_dns_response_size_bytes")["udp"]
	if got := size.Counts[len(size.Counts)-1]; got != n+1 {
		t.Errorf("response sizes counted %d, want %d", got, n+1)
	}
	if size.Sum < float64(n+1)*dnswire.HeaderLen {
		t.Errorf("response size sum %v too small", size.Sum)
	}
}

// Timing every answer (SetTimeEvery(1)) allocates nothing on the table and the
// cache paths.
func TestAnswerTimingAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector")
	}
	reg := newTestRegistry()
	cfg := testConfig(newCachedResolver(t))
	cfg.Registry = reg
	h, err := NewHandler(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.SetTable(demoTable(t))
	for _, mask := range []uint32{0, observe.TimeEvery - 1} {
		h.obs.SetTimeEvery(mask + 1)
		for _, qname := range []string{"web.demo.svc.cluster.local.", "nope.demo.svc.cluster.local.", "www.example.org."} {
			pkt, err := newQuery(qname, dns.TypeA).Pack()
			if err != nil {
				t.Fatal(err)
			}
			dst := make([]byte, 0, maxUDPPacket)
			h.Serve(t.Context(), dst, pkt, UDP) // table answers are kept on the second ask
			if a := testing.AllocsPerRun(200, func() { h.Serve(t.Context(), dst, pkt, UDP) }); a != 0 {
				t.Errorf("mask %d, %s: %v allocs per answer, want 0", mask, qname, a)
			}
		}
	}
	if got := reg.series(t, "meshdns_dns_answer_duration_seconds")["udp,cache,noerror"].Counts; len(got) == 0 || got[infBucket] < 200 {
		t.Errorf("cache answers timed %v, want >= 200", got)
	}
}

// A TCP connection usually carries one query: each starts its 1-in-16
// count at a random phase, so short connections are timed too. 200 of
// them time none with probability (15/16)^200, about 2.5e-6.
func TestAnswerDurationShortTCP(t *testing.T) {
	reg := newTestRegistry()
	cfg := testConfig(&fakeResolver{})
	cfg.Registry = reg
	s := startServer(t, cfg)
	s.SetTable(demoTable(t))
	for range 200 {
		exchange(t, "tcp", tcpAddr(s), newQuery("web.demo.svc.cluster.local.", dns.TypeA))
	}
	got := reg.series(t, "meshdns_dns_answer_duration_seconds")["tcp,table,noerror"].Counts
	if len(got) == 0 || got[infBucket] == 0 || got[infBucket]%observe.TimeEvery != 0 {
		t.Errorf("tcp table answers counted %v, want a positive multiple of %d", got, observe.TimeEvery)
	}
}
