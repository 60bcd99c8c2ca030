package proxy

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
)

func TestDurBucket(t *testing.T) {
	tests := []struct {
		name string
		ns   uint64
		want int
	}{
		{name: "zero", ns: 0, want: 0},
		{name: "below first bound", ns: 100, want: 0},
		{name: "on first bound", ns: 256, want: 0},
		{name: "past first bound", ns: 257, want: 1},
		{name: "on second bound", ns: 1024, want: 1},
		{name: "past second bound", ns: 1025, want: 2},
		{name: "on last bound", ns: 1 << 32, want: nDurBuckets - 1},
		{name: "past last bound", ns: 1<<32 + 1, want: nDurBuckets},
		{name: "huge", ns: 1 << 62, want: nDurBuckets},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := durBucket(tc.ns)
			if got != tc.want {
				t.Fatalf("durBucket(%d) = %d, want %d", tc.ns, got, tc.want)
			}
			// The bucket agrees with the bounds the registry is given.
			if got < nDurBuckets && float64(tc.ns)*1e-9 > answerDurationBuckets[got]*(1+1e-12) {
				t.Errorf("%dns above its bucket's bound %v", tc.ns, answerDurationBuckets[got])
			}
			if got > 0 && float64(tc.ns)*1e-9 <= answerDurationBuckets[got-1] {
				t.Errorf("%dns fits the bucket below, bound %v", tc.ns, answerDurationBuckets[got-1])
			}
		})
	}
}

func TestSizeBucket(t *testing.T) {
	tests := []struct {
		name string
		n    uint64
		want int
	}{
		{name: "header only", n: 12, want: 0},
		{name: "on first bound", n: 64, want: 0},
		{name: "past first bound", n: 65, want: 1},
		{name: "512", n: 512, want: 3},
		{name: "on last bound", n: 65536, want: nSizeBuckets - 1},
		{name: "past last bound", n: 65537, want: nSizeBuckets},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := sizeBucket(tc.n); got != tc.want {
				t.Fatalf("sizeBucket(%d) = %d, want %d", tc.n, got, tc.want)
			}
			if got := sizeBucket(tc.n); got < nSizeBuckets && float64(tc.n) > responseSizeBuckets[got] {
				t.Errorf("%d above its bucket's bound %v", tc.n, responseSizeBuckets[got])
			}
		})
	}
}

// Sampled timing over real sockets: one reader, so its 1-in-16 count is
// exact, and the weighted histogram counts every answer.
func TestAnswerDurationSampled(t *testing.T) {
	reg := newTestRegistry()
	cfg := testConfig(&fakeResolver{answer: staticAnswer(t, "A 192.0.2.1")})
	cfg.Registry, cfg.UDPSockets = reg, 1
	s := startServer(t, cfg)
	s.SetTable(demoTable(t))
	const n = 4 * answerTimeEvery
	for range n {
		exchange(t, "udp", udpAddr(s), newQuery("web.demo.svc.cluster.local.", dns.TypeA))
	}
	for range 3 {
		exchange(t, "udp", udpAddr(s), newQuery("nope.demo.svc.cluster.local.", dns.TypeA))
	}
	exchange(t, "udp", udpAddr(s), newQuery("www.example.org.", dns.TypeA))

	dur := reg.series(t, "meshdns_dns_answer_duration_seconds")
	table := dur["udp,table,noerror"]
	if got := table.Counts[nDurBuckets]; got != n {
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
	if got := dur["udp,cache,noerror"].Counts; len(got) == 0 || got[nDurBuckets] != 1 {
		t.Errorf("forwarded answer counts %v, want one timed", got)
	}
	size := reg.series(t, "meshdns_dns_response_size_bytes")["udp"]
	if got := size.Counts[nSizeBuckets]; got != n+1 {
		t.Errorf("response sizes counted %d, want %d", got, n+1)
	}
	if size.Sum < float64(n+1)*dnswire.HeaderLen {
		t.Errorf("response size sum %v too small", size.Sum)
	}
}

// Timing every answer (timeMask 0) allocates nothing on the table and the
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
	for _, mask := range []uint32{0, answerTimeEvery - 1} {
		h.timeMask = mask
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
	if got := reg.series(t, "meshdns_dns_answer_duration_seconds")["udp,cache,noerror"].Counts; len(got) == 0 || got[nDurBuckets] < 200 {
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
	if len(got) == 0 || got[nDurBuckets] == 0 || got[nDurBuckets]%answerTimeEvery != 0 {
		t.Errorf("tcp table answers counted %v, want a positive multiple of %d", got, answerTimeEvery)
	}
}
