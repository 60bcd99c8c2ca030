package main

import (
	"os"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protojson"

	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// The table file the agent reads must be valid protojson with every
// service of benchEntries.
func TestWriteTableFile(t *testing.T) {
	path, err := writeTableFile(t.TempDir(), 250)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var nt meshdnsv1.NameTable
	if err := protojson.Unmarshal(b, &nt); err != nil {
		t.Fatalf("protojson: %v", err)
	}
	if len(nt.GetTable()) != 250 {
		t.Errorf("%d names, want 250", len(nt.GetTable()))
	}
	info := nt.GetTable()["svc7.ns7.svc.cluster.local"]
	got := []string{info.GetShortname(), info.GetNamespace(), info.GetIps()[0], info.GetPorts()[0].GetName()}
	if diff := cmp.Diff([]string{"svc7", "ns7", "10.0.0.7", "http"}, got); diff != "" {
		t.Errorf("svc7 (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"cluster.local"}, nt.GetAuthoritativeZones()); diff != "" {
		t.Errorf("zones (-want +got):\n%s", diff)
	}
}

func TestCPUSecondsAndRSS(t *testing.T) {
	pid := os.Getpid()
	before, err := cpuSeconds(pid)
	if err != nil {
		t.Fatal(err)
	}
	// Burn CPU until the tick counter moves (10ms ticks), or fail.
	deadline := time.Now().Add(5 * time.Second)
	x := 0
	for {
		for i := range 1_000_000 {
			x += i
		}
		after, err := cpuSeconds(pid)
		if err != nil {
			t.Fatal(err)
		}
		if after > before {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cpu time stuck at %v after 5s of work (%d)", after, x)
		}
	}
	rss, err := rssMB(pid)
	if err != nil || rss <= 0 || rss > 4096 {
		t.Errorf("rss = %v MB, %v", rss, err)
	}
}

func TestPercentile(t *testing.T) {
	v := make([]float64, 100)
	for i := range v {
		v[i] = float64(100 - i)
	}
	tests := []struct {
		name string
		p    float64
		want float64
	}{
		{name: "median", p: 0.5, want: 51},
		{name: "p99", p: 0.99, want: 100},
		{name: "min", p: 0, want: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := percentile(v, tc.p); got != tc.want {
				t.Errorf("percentile(%v) = %v, want %v", tc.p, got, tc.want)
			}
		})
	}
}
