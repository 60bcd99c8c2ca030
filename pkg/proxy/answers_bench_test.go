package proxy

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/miekg/dns"
)

// BenchmarkBuildAnswer is the first query for a name: the Lookup and the
// packing of the reply that the cache then keeps. Its B/op is the garbage
// a pod makes while every name is asked once, which sets the peak of that
// phase at the default GOGC.
func BenchmarkBuildAnswer(b *testing.B) {
	const n = 10000
	tbl := serviceTable(b, n)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("svc%d.ns%d.svc.cluster.local.", i, i%100)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		p := dnswire.GetPacker()
		a, err := buildAnswer(tbl, p, names[i%n], dns.TypeA, dns.ClassINET)
		p.Release()
		if err != nil || a.kind != kindPacked || len(a.msg) == 0 {
			b.Fatalf("answer %+v, %v", a, err)
		}
		i++
	}
}

// BenchmarkFirstAnswer serves the names of a 10,000-service table in turn
// through the handler, each asked once per pass, so nearly every query is
// a first answer: the Lookup, the packing, the admission filter, and from
// the second pass the cache's put, generations included. Its B/op is the
// garbage of serving every name once.
func BenchmarkFirstAnswer(b *testing.B) {
	const n = 10000
	h, err := NewHandler(testConfig(newCachedResolver(b)))
	if err != nil {
		b.Fatal(err)
	}
	h.SetTable(serviceTable(b, n))
	pkts := make([][]byte, n)
	for i := range pkts {
		if pkts[i], err = newQuery(fmt.Sprintf("svc%d.ns%d.svc.cluster.local.", i, i%100), dns.TypeA).Pack(); err != nil {
			b.Fatal(err)
		}
	}
	ctx := b.Context()
	dst := make([]byte, 0, maxUDPPacket)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if r := h.Serve(ctx, dst, pkts[i%n], UDP); len(r) < dnswire.HeaderLen || r[7] != 1 {
			b.Fatalf("reply %x", r)
		}
		i++
	}
}

// BenchmarkTableAnswers serves 1,000 distinct questions of each shape a
// table answers with, from a 1,000-service table with a pod's search
// path, once with every answer kept (cached) and once with a cache that
// keeps none (uncached: every query is a Lookup and a packing). A table
// answer must cost about the same either way and allocate nothing.
func BenchmarkTableAnswers(b *testing.B) {
	const n = 1000
	tbl := searchTable(b, n)
	shapes := []struct {
		name  string
		qname string // format of i, i%100
		qtype uint16
	}{
		{name: "known", qname: "svc%d.ns%d.svc.cluster.local.", qtype: dns.TypeA},
		{name: "search_expanded", qname: "svc%d.ns%d.ns0.svc.cluster.local.", qtype: dns.TypeA},
		{name: "search_expanded_nodata", qname: "svc%d.ns%d.ns0.svc.cluster.local.", qtype: dns.TypeAAAA},
		{name: "nxdomain_other_ns", qname: "host%d.example.com.ns%d.svc.cluster.local.", qtype: dns.TypeA},
	}
	for _, sh := range shapes {
		pkts := make([][]byte, n)
		for i := range pkts {
			var err error
			if pkts[i], err = newQuery(fmt.Sprintf(sh.qname, i, 1+i%99), sh.qtype).Pack(); err != nil {
				b.Fatal(err)
			}
		}
		for _, cache := range []struct {
			name  string
			bytes int
		}{{name: "cached", bytes: 64 << 20}, {name: "uncached", bytes: 1}} {
			b.Run(sh.name+"/"+cache.name, func(b *testing.B) {
				cfg := testConfig(newCachedResolver(b))
				cfg.MaxAnswerBytes = cache.bytes
				h, err := NewHandler(cfg)
				if err != nil {
					b.Fatal(err)
				}
				setBenchTiming(h)
				h.SetTable(tbl)
				ctx := b.Context()
				dst := make([]byte, 0, maxUDPPacket)
				for range 2 { // asked again: kept
					for _, p := range pkts {
						h.Serve(ctx, dst, p, UDP)
					}
				}
				// One OS thread for the loop, so its CPU clock is the
				// loop's CPU time (cpu-ns/op), steadier than wall time on
				// a shared machine.
				runtime.LockOSThread()
				defer runtime.UnlockOSThread()
				b.ReportAllocs()
				start, ok := testenv.ThreadCPUTime()
				i := 0
				for b.Loop() {
					if r := h.Serve(ctx, dst, pkts[i%n], UDP); len(r) < dnswire.HeaderLen || r[3]&dnswire.RcodeMask == dns.RcodeServerFailure {
						b.Fatalf("reply %x", r)
					}
					i++
				}
				if end, ok2 := testenv.ThreadCPUTime(); ok && ok2 {
					b.ReportMetric(float64((end-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
				}
			})
		}
	}
}
