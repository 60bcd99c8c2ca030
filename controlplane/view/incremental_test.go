package view

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/controlplane/registry"
)

// touchedBetween is what the registry computes for Model.Touched.
func touchedBetween(prev, m *registry.Model) map[string]struct{} {
	t := map[string]struct{}{}
	for h, cs := range m.Names {
		if !slices.Equal(prev.Names[h], cs) {
			t[h] = struct{}{}
		}
	}
	for h := range prev.Names {
		if _, ok := m.Names[h]; !ok {
			t[h] = struct{}{}
		}
	}
	return t
}

// TestIncrementalMatchesFullBuild drives random changes through a store
// (which updates views from Model.Touched) and checks every version
// against a view built from scratch: same names, same entries, same ID,
// and a delta from the previous version that turns it into the new one.
func TestIncrementalMatchesFullBuild(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	keys := []Key{{Namespace: "a"}, {Namespace: "b"}, {Namespace: "a", ClusterDomain: "edge.local"}}
	s := newStore(t, Config{})
	var views []*View
	cands := map[string][]*registry.Candidate{} // the registry's current state
	var prev *registry.Model
	for step := range 60 {
		// Change a few names: new entry, new address, new visibility,
		// removal; unchanged names keep their candidate pointers.
		for range 1 + rng.IntN(5) {
			host := fmt.Sprintf("n%d.%s", rng.IntN(40), []string{"corp.example", "svc.cluster.local"}[rng.IntN(2)])
			switch rng.IntN(4) {
			case 0:
				delete(cands, host)
			default:
				var ns []string
				if rng.IntN(3) == 0 {
					ns = []string{[]string{"a", "b"}[rng.IntN(2)]}
				}
				m := model(t, 0, nil, ent(host, fmt.Sprintf("10.0.%d.%d", rng.IntN(4), rng.IntN(4)), ns...))
				cands[host] = append(m.Names[host], cands[host]...)[:min(2, len(cands[host])+1)]
			}
		}
		m := &registry.Model{Version: uint64(step + 1), Names: map[string][]*registry.Candidate{}, Zones: []string{"cluster.local"}}
		for h, cs := range cands {
			m.Names[h] = slices.Clone(cs)
			if prev != nil && slices.Equal(prev.Names[h], cs) {
				m.Names[h] = prev.Names[h]
			}
		}
		if step%7 == 3 {
			m.Zones = append(m.Zones, "corp.example")
		}
		if prev != nil {
			m.Touched = touchedBetween(prev, m)
		}
		var before []*Version
		for _, v := range views {
			before = append(before, v.Current())
		}
		s.Apply(m)
		if views == nil {
			for _, k := range keys {
				views = append(views, s.Subscribe(k, nil).View())
			}
		}
		for i, v := range views {
			got := v.Current()
			want := build(m, v.Key(), "cluster.local", time.Time{})
			if diff := cmp.Diff(want.Names(), got.Names(), cmp.Comparer(func(x, y *registry.Candidate) bool { return x == y })); diff != "" {
				t.Fatalf("step %d view %v names (-full +incremental):\n%s", step, v.Key(), diff)
			}
			if want.ID != got.ID || !slices.Equal(want.Zones, got.Zones) {
				t.Fatalf("step %d view %v: id %s zones %v, full build %s %v", step, v.Key(), got.ID, got.Zones, want.ID, want.Zones)
			}
			if before == nil || before[i] == got {
				continue
			}
			r := decode(t, v.Response(before[i].ID, got))
			table := map[string]string{}
			for k, c := range before[i].Names() {
				table[k] = string(c.Bytes)
			}
			for k := range r.GetDelta().GetUpserted() {
				table[k] = string(got.Names()[k].Bytes)
			}
			for _, k := range r.GetDelta().GetRemoved() {
				delete(table, k)
			}
			wantTable := map[string]string{}
			for k, c := range got.Names() {
				wantTable[k] = string(c.Bytes)
			}
			if diff := cmp.Diff(wantTable, table); diff != "" {
				t.Fatalf("step %d view %v: base + delta (-want +got):\n%s", step, v.Key(), diff)
			}
		}
		prev = m
	}
}
