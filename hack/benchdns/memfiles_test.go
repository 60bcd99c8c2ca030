package main

import (
	"maps"
	"os"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"

	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// The memory benchmark's inputs describe the same names in each format,
// and a replaced table changes exactly the names asked to change.
func TestMemFiles(t *testing.T) {
	dir := t.TempDir()
	path, err := writeMemTable(dir, 50, 10)
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
	if len(nt.GetTable()) != 50 {
		t.Fatalf("%d names, want 50", len(nt.GetTable()))
	}
	for i, want := range map[int]bool{0: true, 9: true, 10: false, 49: false} {
		got := nt.GetTable()[memName(i)].GetIps()[0]
		if changed := got != memAddr(i, 0); changed != want {
			t.Errorf("name %d: address %s, changed %v, want %v", i, got, changed, want)
		}
	}
	hosts, err := writeMemHosts(dir, 50)
	if err != nil {
		t.Fatal(err)
	}
	entries, err := writeMemEntries(dir, 50, 0)
	if err != nil {
		t.Fatal(err)
	}
	queries, err := writeMemQueries(dir, 50)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []struct {
		path, line string
		extra      int
	}{
		{hosts, memAddr(7, 0) + " " + memName(7), 0},
		{entries, "- {hostname: " + memName(7) + ", addresses: [\"" + memAddr(7, 0) + "\"]}", 2},
		{queries, memName(7) + " A", 0},
	} {
		b, err := os.ReadFile(f.path)
		if err != nil {
			t.Fatal(err)
		}
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) != 50+f.extra {
			t.Errorf("%s: %d lines, want %d", f.path, len(lines), 50+f.extra)
		}
		if !strings.Contains(string(b), f.line+"\n") {
			t.Errorf("%s lacks %q", f.path, f.line)
		}
	}
}

// The cluster-shaped table holds each kind of Service in its share, reads
// back as protojson wrote it, and changes exactly the services asked to.
func TestClusterTable(t *testing.T) {
	path, err := writeClusterTable(t.TempDir(), 1000, 100)
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
	kinds := map[string]int{}
	for _, info := range nt.GetTable() {
		switch {
		case info.GetCanonicalName() != "":
			kinds["externalname"]++
		case len(info.GetEndpoints()) > 0:
			if n := len(info.GetEndpoints()); n < 3 || n > 10 {
				t.Errorf("headless service with %d endpoints", n)
			}
			kinds["headless"]++
		default:
			if n := len(info.GetPorts()); n < 1 || n > 2 {
				t.Errorf("ClusterIP service with %d ports", n)
			}
			kinds["clusterip"]++
		}
	}
	if want := map[string]int{"clusterip": 850, "headless": 100, "externalname": 50}; !maps.Equal(kinds, want) {
		t.Errorf("kinds %v, want %v", kinds, want)
	}
	for i, changed := range map[int]bool{0: true, 99: true, 100: false, 999: false} {
		if got := nt.GetTable()[memName(i)].GetIps()[0] != memAddr(i, 0); got != changed {
			t.Errorf("service %d changed %v, want %v", i, got, changed)
		}
	}
}
