package registry

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/meshdns/meshdns/pkg/nametable"
)

// BenchmarkConvert10k: what a source update of 10,000 entries costs the
// registry when one of them changed.
func BenchmarkConvert10k(b *testing.B) {
	es := make([]Entry, 10000)
	for i := range es {
		es[i] = Entry{Entry: nametable.Entry{Hostname: fmt.Sprintf("svc%d.corp.example", i), Registry: "File",
			IPs:   []netip.Addr{netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})},
			Ports: []nametable.Port{{Name: "http", Port: 80, Protocol: "TCP"}}}}
	}
	r, err := New(Config{})
	if err != nil {
		b.Fatal(err)
	}
	old := r.convert("file", &Snapshot{Entries: es}, nil)
	b.ReportAllocs()
	for b.Loop() {
		r.convert("file", &Snapshot{Entries: es}, old)
	}
}
