package proxy

import (
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// zonedTable is a table with the headless service db.demo whose
// endpoints 10.0.0.1-8 are in zones a and b (odd ones in a), and
// fd00::1-4 likewise, for a pod in zone.
func zonedTable(tb testing.TB, zone string) *nametable.Table {
	tb.Helper()
	var eps []nametable.Endpoint
	for i := 1; i <= 8; i++ {
		z := "b"
		if i%2 == 1 {
			z = "a"
		}
		ips := []netip.Addr{netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", i))}
		if i <= 4 {
			ips = append(ips, netip.MustParseAddr(fmt.Sprintf("fd00::%d", i)))
		}
		eps = append(eps, nametable.Endpoint{IPs: ips, Zone: z})
	}
	t, err := nametable.New([]nametable.Entry{{Hostname: "db.demo.svc.cluster.local", Registry: "Kubernetes",
		ShortName: "db", Namespace: "demo", Endpoints: eps}}, []string{"cluster.local"},
		nametable.Context{Namespace: "demo", Zone: zone, Search: []string{"demo.svc.cluster.local"}})
	if err != nil {
		tb.Fatal(err)
	}
	return t
}

// answerAddrs returns the addresses of a reply's answer section in order.
func answerAddrs(tb testing.TB, reply []byte) []string {
	tb.Helper()
	m := new(dns.Msg)
	if err := m.Unpack(reply); err != nil {
		tb.Fatalf("unpack: %v", err)
	}
	var out []string
	for _, rr := range m.Answer {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		}
	}
	return out
}

// The pod zone's endpoints come first in every reply and take turns at
// the head; the others follow in the table's order. Cached and uncached
// answers, search-path expansions (a CNAME first) and AAAA alike.
func TestZoneRotatesWithinTheGroup(t *testing.T) {
	tests := []struct {
		name, qname string
		qtype       uint16
		zone        string
		local, rest []string
	}{
		{name: "A in zone a", qname: "db.demo.svc.cluster.local.", qtype: dns.TypeA, zone: "a",
			local: []string{"10.0.0.1", "10.0.0.3", "10.0.0.5", "10.0.0.7"}, rest: []string{"10.0.0.2", "10.0.0.4", "10.0.0.6", "10.0.0.8"}},
		{name: "A in zone b, search path", qname: "db.", qtype: dns.TypeA, zone: "b",
			local: []string{"10.0.0.2", "10.0.0.4", "10.0.0.6", "10.0.0.8"}, rest: []string{"10.0.0.1", "10.0.0.3", "10.0.0.5", "10.0.0.7"}},
		{name: "AAAA in zone a", qname: "db.demo.svc.cluster.local.", qtype: dns.TypeAAAA, zone: "a",
			local: []string{"fd00::1", "fd00::3"}, rest: []string{"fd00::2", "fd00::4"}},
	}
	for _, tt := range tests {
		for _, cacheBytes := range []int{64 << 20, 1} {
			t.Run(fmt.Sprintf("%s/cache=%d", tt.name, cacheBytes), func(t *testing.T) {
				cfg := testConfig(newCachedResolver(t))
				cfg.MaxAnswerBytes = cacheBytes
				h, err := NewHandler(cfg)
				if err != nil {
					t.Fatal(err)
				}
				h.SetTable(zonedTable(t, tt.zone))
				q, err := newQuery(tt.qname, tt.qtype).Pack()
				if err != nil {
					t.Fatal(err)
				}
				first := map[string]bool{}
				// Until every local address has led once: a rotation
				// that never reaches one, or one that reaches the rest,
				// fails below or never ends (the test's timeout).
				for n := 0; len(first) < len(tt.local); n++ {
					got := answerAddrs(t, h.Serve(t.Context(), nil, q, UDP))
					if len(got) != len(tt.local)+len(tt.rest) {
						t.Fatalf("reply %d: %v, want %d addresses", n, got, len(tt.local)+len(tt.rest))
					}
					head := got[:len(tt.local)]
					if !slices.Contains(tt.local, head[0]) {
						t.Fatalf("reply %d starts with %s, not in the pod's zone: %v", n, head[0], got)
					}
					// A rotation of the local group, in its order.
					i := slices.Index(tt.local, head[0])
					if diff := cmp.Diff(append(slices.Clone(tt.local[i:]), tt.local[:i]...), head); diff != "" {
						t.Fatalf("reply %d: local group not a rotation (-want +got):\n%s", n, diff)
					}
					if diff := cmp.Diff(tt.rest, got[len(tt.local):]); diff != "" {
						t.Fatalf("reply %d: the rest moved (-want +got):\n%s", n, diff)
					}
					first[head[0]] = true
				}
			})
		}
	}
}

// Without a pod zone (or with one no endpoint is in) every address takes
// its turn at the head, as before.
func TestZoneFallbackRotatesAll(t *testing.T) {
	for _, zone := range []string{"", "c"} {
		t.Run("zone="+zone, func(t *testing.T) {
			h, err := NewHandler(testConfig(newCachedResolver(t)))
			if err != nil {
				t.Fatal(err)
			}
			h.SetTable(zonedTable(t, zone))
			q, err := newQuery("db.demo.svc.cluster.local.", dns.TypeA).Pack()
			if err != nil {
				t.Fatal(err)
			}
			first := map[string]bool{}
			for len(first) < 8 {
				first[answerAddrs(t, h.Serve(t.Context(), nil, q, UDP))[0]] = true
			}
		})
	}
}

// BenchmarkZonedAnswers serves a headless service's A answer with and
// without a pod zone, cached and not: the zone's group costs nothing per
// query (compare the pairs' ns/op).
func BenchmarkZonedAnswers(b *testing.B) {
	for _, zone := range []string{"", "a"} {
		for _, cache := range []struct {
			name  string
			bytes int
		}{{name: "cached", bytes: 64 << 20}, {name: "uncached", bytes: 1}} {
			b.Run(fmt.Sprintf("zone=%s/%s", zone, cache.name), func(b *testing.B) {
				cfg := testConfig(newCachedResolver(b))
				cfg.MaxAnswerBytes = cache.bytes
				h, err := NewHandler(cfg)
				if err != nil {
					b.Fatal(err)
				}
				setBenchTiming(h)
				h.SetTable(zonedTable(b, zone))
				q, err := newQuery("db.demo.svc.cluster.local.", dns.TypeA).Pack()
				if err != nil {
					b.Fatal(err)
				}
				ctx := b.Context()
				dst := make([]byte, 0, maxUDPPacket)
				h.Serve(ctx, dst, q, UDP)
				h.Serve(ctx, dst, q, UDP)
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				b.ReportAllocs()
				start, ok := testenv.ThreadCPUTime()
				for b.Loop() {
					if r := h.Serve(ctx, dst, q, UDP); len(r) < dnswire.HeaderLen || r[7] != 8 {
						b.Fatalf("reply %x", r)
					}
				}
				if end, ok2 := testenv.ThreadCPUTime(); ok && ok2 {
					b.ReportMetric(float64((end-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
				}
			})
		}
	}
}
