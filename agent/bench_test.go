package agent

import (
	"fmt"
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

func BenchmarkConvert10k(b *testing.B) {
	t := benchTable(10_000)
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := Convert(t, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkConvertWire10k converts a table in the wire form the discovery
// client keeps, each name decoded into one reused NameInfo.
func BenchmarkConvertWire10k(b *testing.B) {
	wire := benchTable(10_000).Marshal()
	b.ReportAllocs()
	for b.Loop() {
		if _, _, err := ConvertWire(wire, Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApply10k is the whole off-hot-path cost of a new table version:
// convert, validate, build and swap.
func BenchmarkApply10k(b *testing.B) {
	t := benchTable(10_000)
	m, err := newMetrics(meshmetrics.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	ts := &tables{pod: nametable.Context{Namespace: "ns1"}, m: m, now: time.Now, publish: func(*nametable.Table) {}}
	b.ReportAllocs()
	for b.Loop() {
		if err := ts.apply(sourceControlPlane, "v", t); err != nil {
			b.Fatal(err)
		}
	}
}
