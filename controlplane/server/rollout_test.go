package server_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/controlplane/server"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// rolloutAgents is how many agents the rollout tests connect to one view:
// more than the quarantine threshold (3: the minimum, above 1% of 10).
const rolloutAgents = 10

// rolloutHarness is a control plane with rolloutAgents agents of
// namespace ns holding its first version, v1; more changes the server's
// configuration further.
func rolloutHarness(t *testing.T, canaryTimeout time.Duration, more ...func(*server.Config)) (h *harness, f *fleet, v1 string) {
	t.Helper()
	h = newHarness(t, harnessOpts{server: func(c *server.Config) {
		c.QuarantineMinAgents, c.CanaryTimeout = 3, canaryTimeout
		for _, m := range more {
			m(c)
		}
	}})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	f = &fleet{t: t}
	for i := range rolloutAgents {
		a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: fmt.Sprintf("p%d", i)})
		v1 = a.Next().GetVersionInfo()
		f.agents = append(f.agents, a)
	}
	return h, f, v1
}

// current is the current version of namespace ns's view.
func (h *harness) current(t *testing.T) string {
	t.Helper()
	return h.views.Lookup(viewKey("ns")).Current().ID
}

// holdAll reports whether every agent of f holds version v.
func (f *fleet) holdAll(v string) func() bool {
	return func() bool {
		for i, a := range f.agents {
			if !f.dead[i] && a.Version != v {
				return false
			}
		}
		return true
	}
}

// crash ends agent i's stream without an answer, as its process dying
// does, and reconnects it as the restarted agent does: holding the
// version it kept and reporting the one it died running.
func (f *fleet) crash(h *harness, i int, died string) {
	f.t.Helper()
	old := f.agents[i]
	old.Close()
	f.agents[i] = cptest.Dial(f.t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: fmt.Sprintf("p%d", i),
		Resume: old.Version, Rejected: died})
}

func TestRolloutPoisonedVersionReachesThreshold(t *testing.T) {
	h, f, _ := rolloutHarness(t, time.Hour)
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("bad.corp.example", "10.0.0.66"))
	v2 := h.current(t)
	// Every agent sent v2 dies running it and reports it on reconnect.
	exposed := map[int]bool{}
	dies := func(i int, r *meshdnsv1.StreamNameTableResponse) bool {
		if r.GetVersionInfo() != v2 {
			return false
		}
		exposed[i] = true
		f.crash(h, i, v2)
		return true
	}
	f.run(func() bool { return h.metric(t, "meshdns_controlplane_quarantined_versions") == 1 }, dies)
	// The fix reaches every agent; whoever is sent v2 on the way dies
	// again.
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("good.corp.example", "10.0.0.7"))
	f.run(f.holdAll(h.current(t)), dies)
	if len(exposed) != 3 {
		t.Errorf("agents sent the poisoned version: %d (%v), want the quarantine threshold, 3", len(exposed), exposed)
	}
	if got := h.metric(t, "meshdns_controlplane_crash_nacks_total", "blame", "table"); got != 3 {
		t.Errorf("crash reports = %v, want 3", got)
	}
}

func TestRolloutHealthyVersionReachesAll(t *testing.T) {
	h, f, _ := rolloutHarness(t, time.Hour)
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("b.corp.example", "10.0.0.2"))
	v2 := h.current(t)
	first := map[int]int{} // agent -> order of its v2
	f.run(f.holdAll(v2), func(i int, r *meshdnsv1.StreamNameTableResponse) bool {
		first[i] = len(first)
		return false
	})
	if len(first) != rolloutAgents {
		t.Errorf("agents sent v2: %d, want %d", len(first), rolloutAgents)
	}
	waitFor(t, "no version held", func() bool { return h.metric(t, "meshdns_controlplane_rollout_held_versions") == 0 })
}

// canaries has every agent of f sent v ACK it but the first, which dies
// without an answer and does not come back, until k agents were sent v;
// it returns the one that died and the canaries.
func (f *fleet) canaries(v string, k int) (dead int, canaries map[int]bool) {
	f.t.Helper()
	dead, canaries = -1, map[int]bool{}
	f.run(func() bool { return len(canaries) == k }, func(i int, r *meshdnsv1.StreamNameTableResponse) bool {
		if r.GetVersionInfo() != v {
			f.t.Fatalf("agent %d was sent %q, want only v2 %q (to the canaries)", i, r.GetVersionInfo(), v)
		}
		canaries[i] = true
		if dead < 0 {
			dead = i
			f.agents[i].Close()
			f.dead = map[int]bool{i: true}
			return true
		}
		return false
	})
	return dead, canaries
}

func TestRolloutCanaryDiesWithoutAck(t *testing.T) {
	h, f, v1 := rolloutHarness(t, time.Hour)
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("b.corp.example", "10.0.0.2"))
	v2 := h.current(t)
	dead, canaries := f.canaries(v2, 3)
	waitFor(t, "v2 held", func() bool { return h.metric(t, "meshdns_controlplane_rollout_held_versions") == 1 })
	// It comes back and reports: the crash is counted, v2 stays held.
	f.agents[dead] = cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: fmt.Sprintf("p%d", dead),
		Resume: v1, Rejected: v2})
	delete(f.dead, dead)
	waitFor(t, "the crash counted", func() bool {
		q := h.srv.Quarantine()
		return len(q) == 1 && q[0].Reports == 1 && !q[0].Quarantined
	})
	// A later version goes to the canaries (the one that died among
	// them), then to everyone; the others never see v2.
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("c.corp.example", "10.0.0.3"))
	v3 := h.current(t)
	f.run(f.holdAll(v3), func(i int, r *meshdnsv1.StreamNameTableResponse) bool {
		if r.GetVersionInfo() == v2 && !canaries[i] {
			t.Errorf("agent %d, not a canary, was sent v2 while a canary had not answered it", i)
		}
		return false
	})
	if got := h.metric(t, "meshdns_controlplane_rollout_canary_timeouts_total"); got != 0 {
		t.Errorf("canary timeouts = %v, want 0", got)
	}
}

func TestRolloutCanaryTimeout(t *testing.T) {
	h, f, _ := rolloutHarness(t, 100*time.Millisecond)
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("b.corp.example", "10.0.0.2"))
	v2 := h.current(t)
	f.canaries(v2, 3)
	// It never comes back: after the timeout another agent takes its
	// place, and v2 reaches everyone.
	f.run(f.holdAll(v2), nil)
	if got := h.metric(t, "meshdns_controlplane_rollout_canary_timeouts_total"); got != 1 {
		t.Errorf("canary timeouts = %v, want 1", got)
	}
}

func TestRolloutNewerVersionSupersedesHeld(t *testing.T) {
	h, f, _ := rolloutHarness(t, time.Hour)
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("b.corp.example", "10.0.0.2"))
	v2 := h.current(t)
	// The canaries apply v2 but answer nothing yet.
	unanswered := map[int][]*meshdnsv1.StreamNameTableResponse{}
	stall := func(i int, r *meshdnsv1.StreamNameTableResponse) bool {
		if err := f.agents[i].Apply(r); err != nil {
			t.Fatalf("agent %d: %v", i, err)
		}
		unanswered[i] = append(unanswered[i], r)
		return true
	}
	f.run(func() bool { return len(unanswered) == 3 }, stall)
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("c.corp.example", "10.0.0.3"))
	v3 := h.current(t)
	// v3 goes to the same canaries, nowhere else before they answer.
	got := 0
	f.run(func() bool { return got == 3 }, func(i int, r *meshdnsv1.StreamNameTableResponse) bool {
		if unanswered[i] == nil || r.GetVersionInfo() != v3 {
			t.Fatalf("agent %d was sent %q before the canaries answered, want v3 %q to a canary", i, r.GetVersionInfo(), v3)
		}
		got++
		return stall(i, r)
	})
	// Each canary answers v3 alone (its answer to v2 would prove v2 and
	// release it if the senders ran before v3's answers came in).
	for i, rs := range unanswered {
		f.agents[i].Ack(rs[len(rs)-1])
	}
	// The others go from v1 straight to v3.
	f.run(f.holdAll(v3), func(i int, r *meshdnsv1.StreamNameTableResponse) bool {
		if r.GetVersionInfo() != v3 {
			t.Errorf("agent %d was sent %q, want v3 %q: v2 was superseded before it was released", i, r.GetVersionInfo(), v3)
		}
		return false
	})
	if v2 == v3 {
		t.Fatal("v2 and v3 are the same version")
	}
}

func TestRolloutCanaryReconnectsBeforeItsStreamEnds(t *testing.T) {
	h, f, v1 := rolloutHarness(t, time.Hour)
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("b.corp.example", "10.0.0.2"))
	v2 := h.current(t)
	// The first canary's pod opens a new stream (its agent restarted)
	// before its old one is seen ending: the new stream takes the slot.
	moved := false
	f.run(func() bool { return moved }, func(i int, r *meshdnsv1.StreamNameTableResponse) bool {
		if r.GetVersionInfo() != v2 {
			t.Fatalf("agent %d was sent %q, want only v2 %q (to the canaries)", i, r.GetVersionInfo(), v2)
		}
		old := f.agents[i]
		f.agents[i] = cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: fmt.Sprintf("p%d", i), Resume: v1})
		if got := f.agents[i].Next().GetVersionInfo(); got != v1 {
			t.Fatalf("the canary's new stream was first sent %q, want v1 %q (held as any other)", got, v1)
		}
		old.Close()
		moved = true
		return true
	})
	f.run(f.holdAll(v2), nil)
}

// podsFeed is a server.Pods whose deletions the test announces.
type podsFeed struct {
	onDelete func(namespace, name, uid string)
}

func (p *podsFeed) OnDelete(f func(namespace, name, uid string)) { p.onDelete = f }

func TestRolloutCanaryPodDeletedFreesSlot(t *testing.T) {
	pods := &podsFeed{}
	h, f, _ := rolloutHarness(t, time.Hour, func(c *server.Config) { c.Pods = pods })
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("b.corp.example", "10.0.0.2"))
	v2 := h.current(t)
	// A canary's agent stops before its pod's deletion is seen, as on
	// SIGTERM: its slot holds v2 (the timeout is an hour) until the
	// deletion says it left rather than crashed; then v2 reaches all.
	dead, _ := f.canaries(v2, 3)
	waitFor(t, "v2 held", func() bool { return h.metric(t, "meshdns_controlplane_rollout_held_versions") == 1 })
	// The deletion comes after the stream's end was seen: v2 was held
	// before the canary's stream ended, so the metric alone does not say.
	waitFor(t, "the canary's stream ended", func() bool { return len(h.srv.Agents()) == rolloutAgents-1 })
	pods.onDelete("ns", fmt.Sprintf("p%d", dead), "uid")
	f.run(f.holdAll(v2), nil)
	if got := h.metric(t, "meshdns_controlplane_rollout_canary_timeouts_total"); got != 0 {
		t.Errorf("canary timeouts = %v, want 0", got)
	}
}
