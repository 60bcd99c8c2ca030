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
