package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/controlplane/server"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// quarantineHarness is a control plane quarantining a table that 3 agents
// reported crashing on, with the view of namespace ns at its first
// version v1 and early, an agent that holds it (and keeps the view).
func quarantineHarness(t *testing.T) (h *harness, early *cptest.Agent, v1 string) {
	t.Helper()
	h = newHarness(t, harnessOpts{server: func(c *server.Config) { c.QuarantineMinAgents = 3 }})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	early = cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: "early"})
	return h, early, early.Next().GetVersionInfo()
}

// crashReports has k agents reconnect holding good and reporting they
// crashed running bad, as an agent does after its process died within
// its probation.
func crashReports(t *testing.T, h *harness, k int, good, bad string) []*cptest.Agent {
	t.Helper()
	as := make([]*cptest.Agent, k)
	for i := range as {
		as[i] = cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: fmt.Sprintf("crashed-%d", i), Resume: good, Rejected: bad})
		// Even below the threshold, an agent is not sent what it
		// reported: it would only reject it.
		got, _, _ := strings.Cut(as[i].Recv().GetVersionInfo(), "+")
		if kept, _, _ := strings.Cut(good, "+"); got != kept {
			t.Errorf("agent %d, reporting %q, was sent table %q, want the one it kept %q", i, bad, got, kept)
		}
	}
	return as
}

func TestCrashReportsQuarantineVersion(t *testing.T) {
	h, early, v1 := quarantineHarness(t)
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("bad.corp.example", "10.0.0.66"))
	v2 := h.views.Lookup(viewKey("ns")).Current().ID
	if r := early.Next(); r.GetVersionInfo() != v2 {
		t.Fatalf("early agent got %q, want v2 %q", r.GetVersionInfo(), v2)
	}
	crashed := crashReports(t, h, 3, v1, v2)
	waitFor(t, "v2 quarantined", func() bool { return h.metric(t, "meshdns_controlplane_quarantined_versions") == 1 })
	if got := h.metric(t, "meshdns_controlplane_crash_nacks_total", "blame", "table"); got != 3 {
		t.Errorf("crash NACKs blaming the table = %v, want 3", got)
	}

	// A new agent and one on v1 are held at v1; the agent that ran v2
	// keeps it.
	fresh := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: "fresh"})
	older := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: "older", Resume: v1})
	for name, a := range map[string]*cptest.Agent{"fresh": fresh, "older": older} {
		if r := a.Next(); r.GetVersionInfo() != v1 {
			t.Errorf("%s agent was sent %q, want v1 %q (v2 %q is quarantined)", name, r.GetVersionInfo(), v1, v2)
		}
		if _, bad := a.Table["bad.corp.example"]; bad {
			t.Errorf("%s agent holds the quarantined name", name)
		}
	}
	for _, ai := range h.srv.Agents() {
		if want := map[bool]string{true: v2}[strings.HasPrefix(ai.Pod, "crashed-")]; ai.Rejected != want {
			t.Errorf("agent %s: rejected %q, want %q", ai.Pod, ai.Rejected, want)
		}
	}
	want := []server.QuarantineInfo{{ClusterDomain: "cluster.local", Version: v2, Reports: 3, Threshold: 3, Quarantined: true,
		HeldAt: v1, Reason: "agent died running " + v2, LastAgent: "ns/crashed-2/"}}
	got := h.srv.Quarantine()
	for i := range got {
		got[i].Since = want[i].Since
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Quarantine() (-want +got):\n%s", diff)
	}

	// A later version lifts the quarantine and reaches everyone (its
	// canaries among them: every agent answers); none is sent v2 on the
	// way. (The early agent, holding v2, may be taken back to v1 while
	// v3 is with its canaries: v1 is what the others are held at.)
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("good.corp.example", "10.0.0.7"))
	v3 := h.views.Lookup(viewKey("ns")).Current().ID
	fl := &fleet{t: t, agents: append([]*cptest.Agent{early, fresh, older}, crashed...)}
	fl.run(fl.holdAll(v3), func(i int, r *meshdnsv1.StreamNameTableResponse) bool {
		if v := r.GetVersionInfo(); v != v3 && v != v1 {
			t.Errorf("agent %d was sent %q, want v3 %q", i, v, v3)
		}
		return false
	})
	// Lifted, not remembered: v2 coming back is sent again (and
	// reported again if it still kills agents).
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("bad.corp.example", "10.0.0.66"))
	if r := fresh.Next(); r.GetVersionInfo() != v2 {
		t.Errorf("after v3, v2 again: fresh agent was sent %q, want v2 %q", r.GetVersionInfo(), v2)
	}
	if got := h.metric(t, "meshdns_controlplane_quarantined_versions"); got != 0 {
		t.Errorf("quarantined versions after v3 = %v, want 0", got)
	}
}

func TestCrashReportsBelowThreshold(t *testing.T) {
	h, early, v1 := quarantineHarness(t)
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("bad.corp.example", "10.0.0.66"))
	v2 := h.views.Lookup(viewKey("ns")).Current().ID
	// The early agent, its canary, applied it: released.
	if r := early.Next(); r.GetVersionInfo() != v2 {
		t.Fatalf("early agent was sent %q, want v2 %q", r.GetVersionInfo(), v2)
	}
	waitFor(t, "v2 released", func() bool { return h.metric(t, "meshdns_controlplane_rollout_held_versions") == 0 })
	// The same pod reporting twice is one agent.
	crashReports(t, h, 2, v1, v2)
	crashReports(t, h, 1, v1, v2)
	fresh := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: "fresh"})
	if r := fresh.Next(); r.GetVersionInfo() != v2 {
		t.Errorf("fresh agent was sent %q, want v2 %q (2 reports, threshold 3)", r.GetVersionInfo(), v2)
	}
	if got := h.srv.Quarantine(); len(got) != 1 || got[0].Quarantined || got[0].Reports != 2 {
		t.Errorf("Quarantine() = %+v, want v2 reported by 2, not quarantined", got)
	}
}

func TestAbortedNACKsQuarantineVersion(t *testing.T) {
	h, early, v1 := quarantineHarness(t)
	as := []*cptest.Agent{early}
	for i := range 3 {
		a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: fmt.Sprintf("live-%d", i)})
		a.Next()
		as = append(as, a)
	}
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("bad.corp.example", "10.0.0.66"))
	v2 := h.views.Lookup(viewKey("ns")).Current().ID
	// Whoever is sent v2 (its canaries) dies running it and says so on
	// its live stream.
	fl, crashed := &fleet{t: t, agents: as}, 0
	fl.run(func() bool { return crashed == 3 },
		func(i int, r *meshdnsv1.StreamNameTableResponse) bool {
			if r.GetVersionInfo() != v2 {
				return false
			}
			crashed++
			as[i].Send(&meshdnsv1.StreamNameTableRequest{VersionInfo: as[i].Version, ResponseNonce: r.GetNonce(),
				ErrorDetail: &meshdnsv1.ErrorDetail{Code: 10, Message: "probation: serving loop panicked"}})
			return true
		})
	waitFor(t, "v2 quarantined", func() bool { return h.metric(t, "meshdns_controlplane_quarantined_versions") == 1 })
	fresh := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: "fresh"})
	if r := fresh.Next(); r.GetVersionInfo() != v1 {
		t.Errorf("fresh agent was sent %q, want v1 %q", r.GetVersionInfo(), v1)
	}
	// The agents that crashed on v2 are not sent it again (as a full
	// table after a NACKed delta): the next they get is v3, a delta
	// from the v1 they kept; nor is the one held at v1.
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("good.corp.example", "10.0.0.7"))
	v3 := h.views.Lookup(viewKey("ns")).Current().ID
	for i, r := range nextAll(t, append(as, fresh)...) {
		if got, want := [2]string{r.GetVersionInfo(), cptest.Kind(r)}, [2]string{v3, "delta"}; got != want {
			t.Errorf("agent %d after the quarantine was sent %v, want %v", i, got, want)
		}
	}
	for i, a := range as {
		if _, bad := a.Table["bad.corp.example"]; bad {
			t.Errorf("agent %d holds the name of v2", i)
		}
	}
}

func TestCrashReportBlamesSettings(t *testing.T) {
	h, _, v1 := quarantineHarness(t)
	crashReports(t, h, 3, v1+"+aaaa", v1+"+bbbb")
	if got := h.metric(t, "meshdns_controlplane_crash_nacks_total", "blame", "settings"); got != 3 {
		t.Errorf("crash NACKs blaming the settings = %v, want 3", got)
	}
	if got := h.metric(t, "meshdns_controlplane_quarantined_versions"); got != 0 {
		t.Errorf("quarantined versions = %v, want 0: the table is the one the agents kept", got)
	}
}

func TestCrashReportsFractionOfView(t *testing.T) {
	h := newHarness(t, harnessOpts{server: func(c *server.Config) { c.QuarantineMinAgents, c.QuarantineFraction = 1, 0.5 }})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	v1 := ""
	for i := range 2 {
		a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: fmt.Sprintf("calm-%d", i)})
		v1 = a.Next().GetVersionInfo()
	}
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("bad.corp.example", "10.0.0.66"))
	v2 := h.views.Lookup(viewKey("ns")).Current().ID
	// 3 agents: half is 2 reports.
	crashReports(t, h, 1, v1, v2)
	if got := h.srv.Quarantine(); len(got) != 1 || got[0].Quarantined || got[0].Threshold != 2 {
		t.Fatalf("after 1 report of 3 agents: %+v, want not quarantined, threshold 2", got)
	}
	a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: "crashed-1", Resume: v1, Rejected: v2})
	a.Recv()
	if got := h.srv.Quarantine(); len(got) != 1 || !got[0].Quarantined || got[0].Reports != 2 {
		t.Errorf("after 2 reports of 4 agents: %+v, want quarantined", got)
	}
}

func TestQuarantineForgetsRemovedViews(t *testing.T) {
	h := newHarness(t, harnessOpts{idleTTL: time.Millisecond, server: func(c *server.Config) { c.QuarantineMinAgents = 1 }})
	onlyX := entry("x.corp.example", "10.0.0.1", "ns-x")
	h.publish(t, onlyX)
	key := viewKey("ns-x")
	seed := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns-x", Pod: "seed"})
	bad := seed.Next().GetVersionInfo()
	// One report quarantines the view's table. (The view has no other:
	// the agent keeps its own, and is sent nothing.)
	a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns-x", Pod: "crashed", Resume: "0000000000000000", Rejected: bad})
	waitFor(t, "quarantined", func() bool { return h.metric(t, "meshdns_controlplane_quarantined_versions") == 1 })
	// The agents go, and with them (idle) the view.
	seed.Close()
	a.Close()
	waitFor(t, "the agent gone", func() bool { return len(h.srv.Agents()) == 0 })
	n := 0
	waitFor(t, "the view removed", func() bool {
		n++
		h.publish(t, onlyX, entry(fmt.Sprintf("y%d.corp.example", n), "10.0.0.2", "ns-y"))
		return h.views.Lookup(key) == nil
	})
	if got := h.srv.Quarantine(); len(got) != 0 {
		t.Errorf("Quarantine() after the view was removed = %+v, want none", got)
	}
	if got := h.metric(t, "meshdns_controlplane_quarantined_versions"); got != 0 {
		t.Errorf("quarantined versions after the view was removed = %v, want 0", got)
	}
}
