package server

import (
	"testing"
	"time"

	"github.com/meshdns/meshdns/controlplane/view"
)

// TestRolloutLeaveDeletedPod: a canary whose stream ends with a version
// not ACKed holds its slot (it may have crashed), unless its pod was seen
// deleted meanwhile: a deletion told while the stream was ending finds
// the stream no longer filed to be stopped, and must still free the slot.
func TestRolloutLeaveDeletedPod(t *testing.T) {
	for _, tc := range []struct {
		name     string
		deleted  bool
		wantWake bool
		wantHeld int
	}{
		{name: "not deleted: the slot waits for the timeout", deleted: false, wantWake: false, wantHeld: 1},
		{name: "deleted meanwhile: the slot is free", deleted: true, wantWake: true, wantHeld: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRollout(func(int) int { return 1 }, time.Hour)
			g := &gate{k: 1, byAgent: map[*agent]*canary{}}
			g.stable.Store(unproven)
			a := &agent{gate: g}
			c := &canary{key: "ns/p/", a: a, sent: &view.Version{Seq: 2}}
			g.canaries, g.byAgent[a] = []*canary{c}, c
			g.agents.Store(1)

			asked := false
			woke := r.leave(a, false, func() bool { asked = true; return tc.deleted })
			if c.timer != nil {
				c.timer.Stop()
			}
			if !asked {
				t.Fatal("leave did not ask whether the pod was deleted")
			}
			if woke != tc.wantWake || len(g.canaries) != tc.wantHeld {
				t.Errorf("leave = %v with %d canaries held, want %v with %d", woke, len(g.canaries), tc.wantWake, tc.wantHeld)
			}
			if c.a != nil {
				t.Error("the canary still names the agent that left")
			}
		})
	}
}

// TestRolloutNewStreamOfCanaryPod: a pod whose agent restarted opens a
// new stream before its old one is seen ending. While a slot is free the
// new stream must not take it: the pod would hold two, and its report
// would count twice. It takes the old stream's slot when that one ends.
func TestRolloutNewStreamOfCanaryPod(t *testing.T) {
	r := newRollout(func(int) int { return 3 }, time.Hour)
	g := &gate{byAgent: map[*agent]*canary{}}
	g.stable.Store(&view.Version{Seq: 1})
	g.agents.Store(5)
	old := &agent{gate: g, namespace: "ns", pod: "p0"}
	if r.enlistLocked(g, old) == nil {
		t.Fatal("the first agent found no free slot")
	}
	again := &agent{gate: g, namespace: "ns", pod: "p0"}
	if c := r.enlistLocked(g, again); c != nil {
		t.Errorf("the pod's new stream took a second slot (%d canaries)", len(g.canaries))
	}
	other := &agent{gate: g, namespace: "ns", pod: "p1"}
	if r.enlistLocked(g, other) == nil {
		t.Error("another pod found no free slot")
	}
}
