package controlplane_test

import (
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/testkit/loadagent"
)

// TestScaleFleetTLS: the scale benchmark's pieces with mTLS, small: a
// control plane child serving mTLS with SPIFFE identities and agents in
// two children, each from a loopback address of its own with its own
// certificate, every one admitted by its SPIFFE ID and served.
func TestScaleFleetTLS(t *testing.T) {
	dir := t.TempDir()
	writeEntries(t, dir, 10, 1, 1, "10.200.0.0", true)
	pki := newBenchPKI(t)
	cp := startBenchCP(t, dir, "", pki)
	spec := fleetSpec{addrs: []string{cp.grpc}, agents: 4, procs: 2, namespaces: 2, sources: 4, watch: "svc0.corp.example"}
	spec.bundles = pki.bundles(t, spec)
	fl := startFleet(t, spec)
	seen := map[int]bool{}
	fl.await(t, time.Minute, "every agent's first table", func() string { return admissions(t, []*benchCP{cp}) },
		func(e loadagent.Event) bool {
			seen[e.Agent] = true
			return len(seen) == spec.agents
		})
	if got := scrape(t, cp.admin, `meshdns_controlplane_stream_admissions_total{method="spiffe",result="ok"}`); got != 4 {
		t.Errorf("%v streams admitted by their SPIFFE ID, want 4", got)
	}
}

// TestScaleFleetSources: more agents than the control plane's default
// bound of connections per address (256) all connect when each dials
// from an address of its own, as the scale benchmark's do; from one
// address the bound refuses the rest, as it does agents behind NAT.
func TestScaleFleetSources(t *testing.T) {
	dir := t.TempDir()
	writeEntries(t, dir, 10, 1, 1, "10.200.0.0", true)
	cp := startBenchCP(t, dir, "", nil)
	spread := fleetSpec{addrs: []string{cp.grpc}, agents: 300, procs: 1, namespaces: 1, sources: 300, watch: "svc0.corp.example"}
	fl := startFleet(t, spread)
	seen := map[int]bool{}
	fl.await(t, time.Minute, "every agent's first table", func() string { return admissions(t, []*benchCP{cp}) },
		func(e loadagent.Event) bool {
			seen[e.Agent] = true
			return len(seen) == spread.agents
		})
	const refused = `meshdns_controlplane_connections_refused_total{reason="peer"}`
	if got := scrape(t, cp.admin, refused); got > 0 {
		t.Fatalf("%v connections refused with an address per agent", got)
	}
	shared := spread
	shared.sources = 0 // every agent from 127.0.0.1
	startFleet(t, shared)
	deadline := time.Now().Add(time.Minute)
	for scrape(t, cp.admin, refused) <= 0 {
		if time.Now().After(deadline) {
			t.Fatal("no connection refused with 300 agents from one address within a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
