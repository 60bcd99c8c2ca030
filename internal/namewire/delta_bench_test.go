package namewire_test

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// BenchmarkApplyDelta10k measures turning a one-name delta into the next
// full table of 10,000 names, in wire form (a copy of the base's bytes).
func BenchmarkApplyDelta10k(b *testing.B) {
	base := &meshdnsv1.NameTable{Table: map[string]*meshdnsv1.NameInfo{}}
	for i := range 10_000 {
		base.Table[fmt.Sprintf("svc%d.ns.svc.cluster.local", i)] = &meshdnsv1.NameInfo{Ips: []string{"10.0.0.1"}}
	}
	wire, err := proto.Marshal(base)
	if err != nil {
		b.Fatal(err)
	}
	d := &namewire.Delta{Upserted: []namewire.RawName{{Host: "new.ns.svc.cluster.local", Info: (&namewire.NameInfo{IPs: []string{"10.0.0.2"}}).Append(nil)}}}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := namewire.ApplyDelta(wire, d); err != nil {
			b.Fatal(err)
		}
	}
}
