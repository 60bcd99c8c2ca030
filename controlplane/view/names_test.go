package view

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/controlplane/registry"
)

// TestNamesOverlay: a chain of versions built by with() (overlays, folds,
// names removed and added back) equals plain maps changed the same way,
// and no version changes when a later one is made.
func TestNamesOverlay(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	cands := make([]*registry.Candidate, 8)
	for i := range cands {
		cands[i] = &registry.Candidate{Hash: uint64(i)}
	}
	ref := map[string]*registry.Candidate{}
	for i := range 400 {
		ref[fmt.Sprintf("n%d", i)] = cands[0]
	}
	cur := namesOf(maps.Clone(ref))
	type snap struct {
		ns   names
		want map[string]*registry.Candidate
	}
	var history []snap
	folds := 0
	for step := range 300 {
		changes := map[string]*registry.Candidate{}
		for range 1 + r.IntN(4) {
			k := fmt.Sprintf("n%d", r.IntN(480)) // some never existed
			if r.IntN(3) == 0 {
				changes[k] = nil
			} else {
				changes[k] = cands[r.IntN(len(cands))]
			}
		}
		next := cur.with(changes)
		if next.over == nil {
			folds++
		}
		for k, c := range changes {
			if c == nil {
				delete(ref, k)
			} else {
				ref[k] = c
			}
		}
		if next.len() != len(ref) {
			t.Fatalf("step %d: len %d, want %d", step, next.len(), len(ref))
		}
		for k := range changes {
			if got := next.get(k); got != ref[k] {
				t.Fatalf("step %d: get(%s) = %v, want %v", step, k, got, ref[k])
			}
		}
		if step%10 == 0 {
			history = append(history, snap{next, maps.Clone(ref)})
		}
		cur = next
	}
	if folds == 0 || folds > 50 {
		t.Errorf("%d folds in 300 steps: the overlay is not used as intended", folds)
	}
	eq := cmp.Comparer(func(x, y *registry.Candidate) bool { return x == y })
	for i, s := range history {
		if diff := cmp.Diff(s.want, s.ns.toMap(), eq); diff != "" {
			t.Fatalf("version %d changed or is wrong (-want +got):\n%s", i, diff)
		}
	}
}
