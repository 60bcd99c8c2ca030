package server_test

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/controlplane/server"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// restartedHarness is a control plane that has just started with the
// view of namespace ns at v2, its first version, and n agents
// reconnecting to it holding v1, which an earlier control plane (another
// harness) served them: the new process knows nothing of v1.
func restartedHarness(t *testing.T, o harnessOpts, n int) (h *harness, f *fleet, v1, v2 string) {
	t.Helper()
	before := newHarness(t, harnessOpts{})
	before.publish(t, entry("a.corp.example", "10.0.0.1"))
	old := cptest.Dial(t, before.addr, cptest.DialOpts{Namespace: "ns", Pod: "before"})
	v1 = old.Next().GetVersionInfo()
	old.Close()

	h = newHarness(t, o)
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("b.corp.example", "10.0.0.2"))
	f = &fleet{t: t}
	for range n {
		f.back(h, v1)
	}
	// The store builds a namespace's view for its first agent.
	waitFor(t, "the view built", func() bool { return h.views.Lookup(viewKey("ns")) != nil })
	v2 = h.current(t)
	if table, _, _ := strings.Cut(v1, "+"); table == v2 {
		t.Fatalf("v1 %q and v2 %q are the same table", v1, v2)
	}
	return h, f, v1, v2
}

// back connects one more agent to f, holding version v1.
func (f *fleet) back(h *harness, v1 string) {
	f.agents = append(f.agents, cptest.Dial(f.t, h.addr, cptest.DialOpts{Namespace: "ns",
		Pod: fmt.Sprintf("p%d", len(f.agents)), Resume: v1}))
}

// rolloutOpts is the rollout tests' configuration: a threshold of 3 for
// rolloutAgents agents, canaries that never time out.
func rolloutOpts() harnessOpts {
	return harnessOpts{server: func(c *server.Config) { c.QuarantineMinAgents, c.CanaryTimeout = 3, time.Hour }}
}

// stall takes the first response of k agents of f, which must be v, and
// leaves them unanswered; it returns them by agent.
func (f *fleet) stall(v string, k int) map[int]*meshdnsv1.StreamNameTableResponse {
	f.t.Helper()
	got := map[int]*meshdnsv1.StreamNameTableResponse{}
	f.run(func() bool { return len(got) == k }, func(i int, r *meshdnsv1.StreamNameTableResponse) bool {
		if r.GetVersionInfo() != v || got[i] != nil {
			f.t.Fatalf("agent %d was sent %q (a second response: %v), want only %q to the canaries",
				i, r.GetVersionInfo(), got[i] != nil, v)
		}
		got[i] = r
		return true
	})
	return got
}

// none asserts that no agent of f outside except gets a response for d:
// what an agent held at its own table is sent.
func (f *fleet) none(d time.Duration, except map[int]*meshdnsv1.StreamNameTableResponse) {
	f.t.Helper()
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(d))}}
	idx := []int{-1}
	for i, a := range f.agents {
		if except[i] == nil && !f.dead[i] {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(a.Resps)})
			idx = append(idx, i)
		}
	}
	if c, v, _ := reflect.Select(cases); c > 0 {
		f.t.Fatalf("agent %d, held at its own table, was sent %v", idx[c], v.Interface())
	}
}

// ackAll applies and ACKs rs.
func (f *fleet) ackAll(rs map[int]*meshdnsv1.StreamNameTableResponse) {
	f.t.Helper()
	for i, r := range rs {
		if err := f.agents[i].Apply(r); err != nil {
			f.t.Fatalf("agent %d: %v", i, err)
		}
		f.agents[i].Ack(r)
	}
}

func TestRolloutRestartHoldsUnprovenVersion(t *testing.T) {
	h, f, _, v2 := restartedHarness(t, rolloutOpts(), rolloutAgents)
	// The threshold's first agents are the canaries of v2, which the
	// new process has not seen run anywhere; the others keep v1.
	canaries := f.stall(v2, 3)
	waitFor(t, "v2 held", func() bool { return h.metric(t, "meshdns_controlplane_rollout_held_versions") == 1 })
	f.none(200*time.Millisecond, canaries)
	f.ackAll(canaries)
	// Released: the others get it whole (the server never had v1).
	got := map[int]bool{}
	f.run(f.holdAll(v2), func(i int, r *meshdnsv1.StreamNameTableResponse) bool {
		if canaries[i] != nil || got[i] || r.GetVersionInfo() != v2 || r.GetFull() == nil {
			t.Fatalf("agent %d was sent %q (%s), want v2 %q once, as a full table", i, r.GetVersionInfo(), cptest.Kind(r), v2)
		}
		got[i] = true
		return false
	})
	waitFor(t, "no version held", func() bool { return h.metric(t, "meshdns_controlplane_rollout_held_versions") == 0 })
}

func TestRolloutRestartCanariesCrash(t *testing.T) {
	h, f, v1, v2 := restartedHarness(t, rolloutOpts(), rolloutAgents)
	canaries := f.stall(v2, 3)
	// They die running v2 and say so: one with an ABORTED NACK on its
	// stream, the others in the first request of their next one.
	i := 0
	for c, r := range canaries {
		if i++; i == 1 {
			f.agents[c].Send(&meshdnsv1.StreamNameTableRequest{VersionInfo: v1, ResponseNonce: r.GetNonce(),
				ErrorDetail: &meshdnsv1.ErrorDetail{Code: 10, Message: "probation: serving loop panicked"}})
			continue
		}
		f.crash(h, c, v2)
	}
	waitFor(t, "v2 quarantined", func() bool { return h.metric(t, "meshdns_controlplane_quarantined_versions") == 1 })
	if q := h.srv.Quarantine(); len(q) != 1 || q[0].Version != v2 || q[0].HeldAt != "" {
		t.Errorf("Quarantine() = %+v, want v2 %q quarantined with no version to hold at", q, v2)
	}
	// Nobody is sent anything: not v2, and the server has no other.
	f.none(200*time.Millisecond, nil)
	if got := h.metric(t, "meshdns_controlplane_rollout_held_versions"); got != 1 {
		t.Errorf("held versions = %v, want 1", got)
	}
	// A later version goes to the canaries, then to everyone.
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("c.corp.example", "10.0.0.3"))
	v3 := h.current(t)
	order := []int{}
	f.run(f.holdAll(v3), func(i int, r *meshdnsv1.StreamNameTableResponse) bool {
		if r.GetVersionInfo() != v3 {
			t.Fatalf("agent %d was sent %q, want v3 %q", i, r.GetVersionInfo(), v3)
		}
		order = append(order, i)
		return false
	})
	for n, i := range order[:3] {
		if canaries[i] == nil {
			t.Errorf("v3's response %d went to agent %d, not a canary of v2 (%v)", n, i, order)
		}
	}
	if got := h.metric(t, "meshdns_controlplane_crash_nacks_total", "blame", "table"); got != 3 {
		t.Errorf("crash reports = %v, want 3", got)
	}
	waitFor(t, "no version held", func() bool { return h.metric(t, "meshdns_controlplane_rollout_held_versions") == 0 })
}

func TestRolloutRestartNewPodGetsCurrent(t *testing.T) {
	h, f, _, v2 := restartedHarness(t, rolloutOpts(), rolloutAgents)
	canaries := f.stall(v2, 3)
	waitFor(t, "v2 held", func() bool { return h.metric(t, "meshdns_controlplane_rollout_held_versions") == 1 })
	// A new pod has no table to fall back to: it gets v2 at once, and is
	// no canary (its ACK releases nothing).
	fresh := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: "fresh"})
	if r := fresh.Next(); r.GetVersionInfo() != v2 || r.GetFull() == nil {
		t.Fatalf("new pod was sent %q (%s), want v2 %q as a full table", r.GetVersionInfo(), cptest.Kind(r), v2)
	}
	f.none(200*time.Millisecond, canaries)
	f.ackAll(canaries)
	f.run(f.holdAll(v2), nil)
}

func TestRolloutRestartCanariesGrowWithAgents(t *testing.T) {
	// A threshold of half the view's agents: the first agent back is the
	// one canary; once six are, there are three.
	h, f, v1, v2 := restartedHarness(t, harnessOpts{server: func(c *server.Config) {
		c.QuarantineMinAgents, c.QuarantineFraction, c.CanaryTimeout = 1, 0.5, time.Hour
	}}, 1)
	canaries := f.stall(v2, 1)
	for range 5 {
		f.back(h, v1)
	}
	for i, r := range f.stall(v2, 2) {
		canaries[i] = r
	}
	f.none(200*time.Millisecond, canaries)
	f.ackAll(canaries)
	f.run(f.holdAll(v2), nil)
}

func TestRolloutRestartHeldAgentTakesGrownSlot(t *testing.T) {
	// A threshold of half the view's agents: one canary for the first.
	h, f, v1, v2 := restartedHarness(t, harnessOpts{server: func(c *server.Config) {
		c.QuarantineMinAgents, c.QuarantineFraction, c.CanaryTimeout = 1, 0.5, time.Hour
	}}, 1)
	canaries := f.stall(v2, 1)
	f.back(h, v1) // held: one slot for two agents
	waitFor(t, "an agent held", func() bool { return h.metric(t, "meshdns_controlplane_rollout_held_versions") == 1 })
	// New pods take no slot but count: with them, the next agent back
	// makes the slots 4 of 7 agents.
	for i := range 4 {
		cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: fmt.Sprintf("new-%d", i)}).Next()
	}
	f.back(h, v1)
	// It takes one; the agent held takes another, though nothing else
	// about it changed.
	for i, r := range f.stall(v2, 2) {
		canaries[i] = r
	}
	if len(canaries) != 3 {
		t.Fatalf("canaries %v, want all 3 agents back", canaries)
	}
	// A slot is left and nobody is held.
	waitFor(t, "no agent held", func() bool { return h.metric(t, "meshdns_controlplane_rollout_held_versions") == 0 })
}

func TestRolloutRestartHeldAgentFreesAdmission(t *testing.T) {
	// One admission slot, one canary.
	h, f, v1, v2 := restartedHarness(t, harnessOpts{admissions: 1, server: func(c *server.Config) {
		c.QuarantineMinAgents, c.CanaryTimeout = 1, time.Hour
	}}, 1)
	// The canary answers (and so frees its slot) without proving v2.
	r := f.agents[0].Recv()
	if r.GetVersionInfo() != v2 {
		t.Fatalf("canary was sent %q, want v2 %q", r.GetVersionInfo(), v2)
	}
	f.agents[0].Nack(r, "bad table")
	// Held agents are sent nothing, so they answer nothing: each must
	// give its slot up at once, not after the admission timeout.
	f.back(h, v1)
	f.back(h, v1)
	waitFor(t, "both held agents admitted", func() bool { return len(h.srv.Agents()) == 3 })
	if got := h.metric(t, "meshdns_controlplane_admission_waiting"); got != 0 {
		t.Errorf("admission_waiting = %v, want 0", got)
	}
	f.none(200*time.Millisecond, map[int]*meshdnsv1.StreamNameTableResponse{0: r})
}
