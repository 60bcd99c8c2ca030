package ingest

import (
	"fmt"
	"log/slog"
	"testing"

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
	in, err := New(Config{Pod: nametable.Context{Namespace: "ns1"}, Publish: func(*nametable.Table) {},
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
