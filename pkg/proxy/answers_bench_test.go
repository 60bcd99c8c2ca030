package proxy

import (
	"fmt"
	"testing"

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
		p := packers.Get().(*packer)
		a, err := buildAnswer(tbl, p, names[i%n], dns.TypeA, dns.ClassINET)
		p.release()
		if err != nil || a.kind != kindPacked || len(a.msg) == 0 {
			b.Fatalf("answer %+v, %v", a, err)
		}
		i++
	}
}

// BenchmarkFirstAnswer serves the names of a 10,000-service table in turn
// through the handler, with the default cache bound (24 bytes a name:
// about one answer in ten kept), so nearly every query is a first answer:
// the Lookup, the packing and the cache's put, generations included. Its
// B/op is the garbage of serving every name once.
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
		if r := h.Serve(ctx, dst, pkts[i%n], UDP); len(r) < headerLen || r[7] != 1 {
			b.Fatalf("reply %x", r)
		}
		i++
	}
}
