package proxy

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/nametable"
)

// BenchmarkBuildAnswer is the first query for a name: the Lookup and the
// packing of the reply that the cache then keeps. Its B/op is the garbage
// a pod makes while every name is asked once, which sets the peak of that
// phase at the default GOGC.
func BenchmarkBuildAnswer(b *testing.B) {
	var entries []nametable.Entry
	const n = 10000
	for i := range n {
		entries = append(entries, nametable.Entry{
			Hostname: fmt.Sprintf("svc%d.ns%d.svc.cluster.local", i, i%100), Registry: "Kubernetes",
			ShortName: fmt.Sprintf("svc%d", i), Namespace: fmt.Sprintf("ns%d", i%100),
			IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})},
		})
	}
	tbl, err := nametable.New(entries, []string{"cluster.local"}, nametable.Context{Namespace: "ns0"})
	if err != nil {
		b.Fatal(err)
	}
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
