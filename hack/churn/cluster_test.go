package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/controlplane/filesource"
)

// TestClusterFiles: the files the model writes are entries files the
// control plane accepts, with every Service once, and every change moves
// the marker and what it says.
func TestClusterFiles(t *testing.T) {
	dir := t.TempDir()
	c, err := newCluster(dir, 1, 250, 20, 30, 4)
	if err != nil {
		t.Fatal(err)
	}
	count := func() (names int, marker int, endpoints int) {
		t.Helper()
		files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		marker = -1
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			entries, _, err := filesource.Parse(data)
			if err != nil {
				t.Fatalf("%s: %v", filepath.Base(f), err)
			}
			for _, e := range entries {
				names++
				switch {
				case e.Hostname == markerName:
					marker = addrSeq(e.IPs[0].String())
				case strings.HasPrefix(e.Hostname, "hl-"):
					endpoints += len(e.IPs)
				}
			}
		}
		return names, marker, endpoints
	}
	if names, marker, eps := count(); names != 251 || marker != 0 || eps != 80 {
		t.Fatalf("start: %d names, marker %d, %d endpoints; want 251 (250 Services and the marker), 0, 80", names, marker, eps)
	}
	steps := []struct {
		do       func() error
		dNames   int
		dEps     int
		eitherEp bool
	}{
		{do: c.createService, dNames: 1},
		{do: c.deleteService, dNames: -1},
		{do: c.endpointChange, eitherEp: true},
	}
	names, _, eps := count()
	for k, s := range steps {
		if err := s.do(); err != nil {
			t.Fatal(err)
		}
		n, marker, e := count()
		if marker != k+1 {
			t.Errorf("step %d: marker %d, want %d", k, marker, k+1)
		}
		if n-names != s.dNames {
			t.Errorf("step %d: %d names, want %d", k, n, names+s.dNames)
		}
		if s.eitherEp && (e-eps != 1 && e-eps != -1) || !s.eitherEp && e != eps {
			t.Errorf("step %d: %d endpoints, was %d", k, e, eps)
		}
		names, eps = n, e
	}
	if _, err := os.Stat(filepath.Join(dir, "."+hotFile+".tmp")); !os.IsNotExist(err) {
		t.Errorf("a temporary file was left: %v", err)
	}
}
