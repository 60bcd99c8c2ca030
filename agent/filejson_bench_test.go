package agent

import (
	"fmt"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/pkg/nametable"
)

// tableFile is the protojson form of n services, one A record each.
func tableFile(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"authoritative_zones": ["cluster.local"], "table": {`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "\n\"svc-%d.ns-%d.svc.cluster.local\": {\"ips\": [\"10.%d.%d.%d\"]}", i, i%100, byte(i>>16), byte(i>>8), byte(i))
	}
	b.WriteString("\n}}\n")
	return []byte(b.String())
}

// BenchmarkTableFile converts and builds a 100,000-name table file, the
// work between reading the file and serving it.
func BenchmarkTableFile(b *testing.B) {
	file := tableFile(100_000)
	b.Run("convert", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, _, err := convertTableFile(file, Limits{}); err != nil {
				b.Fatal(err)
			}
		}
	})
	entries, zones, err := convertTableFile(file, Limits{})
	if err != nil {
		b.Fatal(err)
	}
	b.Run("build", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := nametable.New(entries, zones, nametable.Context{Namespace: "ns-0", Search: []string{"ns-0.svc.cluster.local"}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
