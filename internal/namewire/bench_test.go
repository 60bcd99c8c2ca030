package namewire_test

import (
	"bytes"
	"strconv"
	"syscall"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// clusterTable is the table file of n services shaped like a cluster (the
// shape of hack/benchdns and agent/ingest's benchmarks): one in 20 an
// ExternalName, one in 10 headless with 3 to 10 endpoints behind one port,
// the others a ClusterIP with one or two named ports.
func clusterTable(n int) []byte {
	b := []byte(`{"authoritativeZones": ["cluster.local"], "table": {`)
	num := strconv.AppendInt
	octets := func(b []byte, a, c, d int) []byte {
		b = append(num(b, int64(a), 10), '.')
		b = append(num(b, int64(c), 10), '.')
		return num(b, int64(d), 10)
	}
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		ns := num([]byte("ns-"), int64(i%100), 10)
		b = append(num(append(b, "\n\"svc-"...), int64(i), 10), '.')
		b = append(append(b, ns...), `.svc.cluster.local": {"registry": "Kubernetes", "shortname": "svc-`...)
		b = append(num(b, int64(i), 10), `", "namespace": "`...)
		b = append(append(b, ns...), `", `...)
		switch {
		case i%20 == 7:
			b = append(num(append(b, `"canonicalName": "ext-`...), int64(i), 10), `.example.com"}`...)
		case i%10 == 3:
			b = append(b, `"ports": [{"name": "http", "port": 8080, "protocol": "TCP"}], "endpoints": [`...)
			for e := range 3 + i%8 {
				if e > 0 {
					b = append(b, ',')
				}
				b = append(num(append(b, `{"hostname": "pod-`...), int64(e), 10), `", "ips": ["10.`...)
				b = append(octets(b, 128+e, i>>8&255, i&255), `"]}`...)
			}
			b = append(b, "]}"...)
		default:
			b = append(b, `"ips": ["10.`...)
			b = append(octets(b, i>>16&255, i>>8&255, i&255), `"], "ports": [{"name": "http", "port": 80, "protocol": "TCP"}`...)
			if i%2 == 0 {
				b = append(b, `, {"name": "grpc", "port": 9090, "protocol": "TCP"}`...)
			}
			b = append(b, "]}"...)
		}
	}
	return append(b, "\n}}\n"...)
}

// BenchmarkJSONTable is the JSON part of an agent's start from a table
// file of 100,000 cluster-shaped services: the skim that finds its zones
// and counts its names, the walk that converts it to the wire form, and
// both, as a start runs them; and, for scale, protojson.Unmarshal of the
// same file into the generated NameTable (what the agent would run with
// the generated code: it decodes only, it yields no wire form, and it
// needs the file whole in memory).
func BenchmarkJSONTable(b *testing.B) {
	in := clusterTable(100_000)
	skim := func(b *testing.B) {
		if _, n, err := namewire.SkimJSONTable(bytes.NewReader(in)); err != nil || n != 100_000 {
			b.Fatal(n, err)
		}
	}
	wire := func(b *testing.B) {
		n := 0
		err := namewire.WalkJSONTableWire(bytes.NewReader(in), func(host, info []byte) error {
			n++
			return nil
		}, func([]string) error { return nil })
		if err != nil || n != 100_000 {
			b.Fatal(n, err)
		}
	}
	for _, c := range []struct {
		name string
		run  func(b *testing.B)
	}{
		{"skim", skim},
		{"wire", wire},
		{"both", func(b *testing.B) { skim(b); wire(b) }},
		{"protojson", func(b *testing.B) {
			var t meshdnsv1.NameTable
			if err := protojson.Unmarshal(in, &t); err != nil || len(t.Table) != 100_000 {
				b.Fatal(len(t.Table), err)
			}
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(in)))
			b.ReportAllocs()
			// CPU time too: on a shared machine, less noisy than the
			// time it took.
			start := cpuTime(b)
			for b.Loop() {
				c.run(b)
			}
			b.ReportMetric(float64((cpuTime(b)-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the CPU time the process has used.
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
