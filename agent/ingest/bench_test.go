package ingest

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"strings"
	"syscall"
	"testing"
	"time"

	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// benchTable is a table of n Kubernetes services with one port each, every
// tenth headless with three endpoints.
func benchTable(n int) *namewire.NameTable {
	t := &namewire.NameTable{Table: make(map[string]*namewire.NameInfo, n), AuthoritativeZones: []string{"cluster.local"}}
	for i := range n {
		ns := fmt.Sprintf("ns%d", i%50)
		svc := fmt.Sprintf("svc%d", i)
		info := &namewire.NameInfo{Registry: "Kubernetes", Shortname: svc, Namespace: ns,
			Ports: []namewire.Port{{Name: "http", Port: 80, Protocol: "TCP"}}}
		if i%10 == 0 {
			for e := range 3 {
				info.Endpoints = append(info.Endpoints, namewire.Endpoint{IPs: []string{fmt.Sprintf("10.%d.%d.%d", 100+e, i>>8&255, i&255)}})
			}
		} else {
			info.IPs = []string{fmt.Sprintf("10.96.%d.%d", i>>8&255, i&255)}
		}
		t.Table[svc+"."+ns+".svc.cluster.local"] = info
	}
	return t
}

// BenchmarkApply10k is the whole off-hot-path cost of a new table version
// that changes every name: compare, convert, validate, build and swap.
func BenchmarkApply10k(b *testing.B) {
	benchApply(b, 10_000)
}

// BenchmarkApplyPatch10k is that of a version changing 1% of the names:
// compare, and patch the table serving.
func BenchmarkApplyPatch10k(b *testing.B) {
	benchApply(b, 100)
}

// benchApply applies versions of a 10,000-name table that alternate the
// addresses of its first changed names.
func benchApply(b *testing.B, changed int) {
	var vs [2]Version
	for i := range vs {
		t := benchTable(10_000)
		n := 0
		for _, info := range t.Table {
			if n == changed {
				break
			}
			if len(info.IPs) > 0 {
				info.IPs = []string{fmt.Sprintf("10.97.%d.%d", i, n&255)}
				n++
			}
		}
		vs[i] = memVersion(fmt.Sprint("v", i), t.Marshal())
	}
	in, err := New(Config[struct{}]{Pod: nametable.Context{Namespace: "ns1"}, Publish: func(*Served[struct{}]) {}, Swap: func(*nametable.Table) {},
		Logger: slog.New(slog.DiscardHandler), Registry: meshmetrics.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if err := in.Apply(SourceControlPlane, vs[i%2]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// clusterJSON is n services shaped like a cluster, in the table file's
// protojson form: 5% ExternalName, 10% headless with 3-10 endpoints, the
// rest ClusterIP with 1-2 named ports (hack/benchdns's cluster shape).
func clusterJSON(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"authoritativeZones": ["cluster.local"], "table": {`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		ns := fmt.Sprintf("ns-%d", i%100)
		fmt.Fprintf(&b, "\n%q: {\"registry\": \"Kubernetes\", \"shortname\": \"svc-%d\", \"namespace\": %q, ",
			fmt.Sprintf("svc-%d.%s.svc.cluster.local", i, ns), i, ns)
		switch {
		case i%20 == 7:
			fmt.Fprintf(&b, "\"canonicalName\": \"ext-%d.example.com\"}", i)
		case i%10 == 3:
			b.WriteString(`"ports": [{"name": "http", "port": 8080, "protocol": "TCP"}], "endpoints": [`)
			for e := range 3 + i%8 {
				if e > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `{"hostname": "pod-%d", "ips": ["10.%d.%d.%d"]}`, e, 128+e, byte(i>>8), byte(i))
			}
			b.WriteString("]}")
		default:
			fmt.Fprintf(&b, `"ips": ["10.%d.%d.%d"], "ports": [{"name": "http", "port": 80, "protocol": "TCP"}`, byte(i>>16), byte(i>>8), byte(i))
			if i%2 == 0 {
				b.WriteString(`, {"name": "grpc", "port": 9090, "protocol": "TCP"}`)
			}
			b.WriteString("]}")
		}
	}
	b.WriteString("\n}}\n")
	return []byte(b.String())
}

// plainJSON is n names with one address each, in the table file's form.
func plainJSON(n int) []byte {
	var b strings.Builder
	b.WriteString(`{"authoritativeZones": ["cluster.local"], "table": {`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "\n\"svc-%d.ns-%d.svc.cluster.local\": {\"ips\": [\"10.%d.%d.%d\"]}", i, i%100, byte(i>>16), byte(i>>8), byte(i))
	}
	b.WriteString("\n}}\n")
	return []byte(b.String())
}

// BenchmarkStartFile is an agent's start from a table file of 100,000
// services shaped like a cluster (or plain names): the conversion to the
// wire form and the first build.
func BenchmarkStartFile(b *testing.B) {
	for _, c := range []struct {
		name string
		json []byte
	}{{"cluster", clusterJSON(100_000)}, {"plain", plainJSON(100_000)}} {
		b.Run(c.name, func(b *testing.B) {
			sum := sha256.Sum256(c.json)
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				in := newBenchIngest(b)
				v := newFileVersion(bytes.NewReader(c.json), int64(len(c.json)), sum)
				if err := v.Convert(b.TempDir()); err != nil {
					b.Fatal(err)
				}
				if err := in.Apply(SourceFile, v); err != nil {
					b.Fatal(err)
				}
				v.Close()
			}
		})
	}
}

// BenchmarkStartWire is a start from the stream's wire form of the same
// tables: the first build.
func BenchmarkStartWire(b *testing.B) {
	for _, c := range []struct {
		name string
		json []byte
	}{{"cluster", clusterJSON(100_000)}, {"plain", plainJSON(100_000)}} {
		b.Run(c.name, func(b *testing.B) {
			var wire []byte
			fv := newFileVersion(bytes.NewReader(c.json), int64(len(c.json)), sha256.Sum256(c.json))
			err := fv.Walk(func(host, info []byte) error {
				wire = namewire.AppendEntry(wire, host, info)
				return nil
			}, func(z string) error {
				wire = namewire.AppendZone(wire, z)
				return nil
			})
			if err != nil {
				b.Fatal(err)
			}
			v := memVersion("v", wire)
			b.ReportAllocs()
			defer reportCPU(b)()
			for b.Loop() {
				if err := newBenchIngest(b).Apply(SourceControlPlane, v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func newBenchIngest(b *testing.B) *Ingest[struct{}] {
	in, err := New(Config[struct{}]{Pod: nametable.Context{Namespace: "ns-0"}, Publish: func(*Served[struct{}]) {}, Swap: func(*nametable.Table) {},
		Logger: slog.New(slog.DiscardHandler), Registry: meshmetrics.NewRegistry()})
	if err != nil {
		b.Fatal(err)
	}
	return in
}

// reportCPU reports the CPU time of the process (every goroutine: the
// collector's, a pipeline's) per operation, from now to the call of the
// function it returns: on a shared machine the wall time per operation
// says more about the neighbours than about the code.
func reportCPU(b *testing.B) func() {
	start := cpuTime(b)
	return func() {
		b.ReportMetric((cpuTime(b)-start).Seconds()/float64(b.N), "cpu-s/op")
	}
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
