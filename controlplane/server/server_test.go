package server_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/controlplane/registry"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"))
}

func TestFullThenDeltas(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("b.corp.example", "10.0.0.2"), entry("c.corp.example", "10.0.0.3"))
	a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns"})
	r := a.Next()
	if diff := cmp.Diff("full", cptest.Kind(r)); diff != "" {
		t.Fatalf("first response kind (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"corp.example"}, a.Zones); diff != "" {
		t.Errorf("zones (-want +got):\n%s", diff)
	}

	steps := []struct {
		name     string
		entries  []registry.Entry
		upserted int
		removed  int
		want     map[string]string
	}{
		{
			name:     "change one",
			entries:  []registry.Entry{entry("a.corp.example", "10.0.0.1"), entry("b.corp.example", "10.0.0.20"), entry("c.corp.example", "10.0.0.3")},
			upserted: 1,
			want:     map[string]string{"a.corp.example": "10.0.0.1", "b.corp.example": "10.0.0.20", "c.corp.example": "10.0.0.3"},
		},
		{
			name:    "remove one",
			entries: []registry.Entry{entry("a.corp.example", "10.0.0.1"), entry("b.corp.example", "10.0.0.20")},
			removed: 1,
			want:    map[string]string{"a.corp.example": "10.0.0.1", "b.corp.example": "10.0.0.20"},
		},
		{
			name:     "add one, mixed case",
			entries:  []registry.Entry{entry("a.corp.example", "10.0.0.1"), entry("b.corp.example", "10.0.0.20"), entry("D.Corp.Example.", "fd00::4")},
			upserted: 1,
			want:     map[string]string{"a.corp.example": "10.0.0.1", "b.corp.example": "10.0.0.20", "d.corp.example": "fd00::4"},
		},
	}
	for _, s := range steps {
		t.Run(s.name, func(t *testing.T) {
			h.publish(t, s.entries...)
			r := a.Next()
			if diff := cmp.Diff("delta", cptest.Kind(r)); diff != "" {
				t.Fatalf("kind (-want +got):\n%s", diff)
			}
			d := r.GetDelta()
			if diff := cmp.Diff([2]int{s.upserted, s.removed}, [2]int{len(d.GetUpserted()), len(d.GetRemoved())}); diff != "" {
				t.Errorf("upserted, removed (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(s.want, a.IPs()); diff != "" {
				t.Errorf("table (-want +got):\n%s", diff)
			}
		})
	}
	// ACKs travel after the responses: wait for the fourth.
	waitFor(t, "4 push latency samples", func() bool { return h.metric(t, "meshdns_controlplane_push_duration_seconds") >= 4 })
}

func TestNACKSendsFullTable(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns"})
	a.Next()

	h.publish(t, entry("a.corp.example", "10.0.0.2"))
	r := a.Recv()
	if cptest.Kind(r) != "delta" {
		t.Fatalf("got %s, want delta", cptest.Kind(r))
	}
	a.Nack(r, "bad address in a.corp.example") // keep the old table

	r = a.Next()
	if diff := cmp.Diff("full", cptest.Kind(r)); diff != "" {
		t.Fatalf("after NACK (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{"a.corp.example": "10.0.0.2"}, a.IPs()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	if got := h.metric(t, "meshdns_controlplane_nacks_total"); got != 1 {
		t.Errorf("nacks = %v, want 1", got)
	}
	// The stream goes on with deltas.
	h.publish(t, entry("a.corp.example", "10.0.0.3"))
	if r := a.Next(); cptest.Kind(r) != "delta" {
		t.Errorf("after recovery got %s, want delta", cptest.Kind(r))
	}

	// A NACKed full table is not resent (the agent would reject it
	// again); the next version comes as a delta from the table the agent
	// kept.
	h.publish(t, entry("a.corp.example", "10.0.0.4"))
	r = a.Recv()
	a.Nack(r, "bad address")
	r = a.Recv()
	if cptest.Kind(r) != "full" {
		t.Fatalf("after a NACKed delta got %s, want full", cptest.Kind(r))
	}
	a.Nack(r, "still bad")
	a.None(100 * time.Millisecond)
	h.publish(t, entry("a.corp.example", "10.0.0.5"))
	if r := a.Next(); cptest.Kind(r) != "delta" {
		t.Errorf("after a NACKed full table got %s, want a delta from the kept table", cptest.Kind(r))
	}
	if diff := cmp.Diff(map[string]string{"a.corp.example": "10.0.0.5"}, a.IPs()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	b := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: "b"})
	r = b.Recv()
	b.Nack(r, "table too large")
	b.None(100 * time.Millisecond)
	if got := h.metric(t, "meshdns_controlplane_nacks_total"); got != 4 {
		t.Errorf("nacks = %v, want 4", got)
	}
}

// TestPipelinedNACKsGetOneFullTable: deltas are pipelined, so when the
// agent rejects one, the ones already on the way fail too (wrong base);
// only the first NACK may cause a full table.
func TestPipelinedNACKsGetOneFullTable(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns"})
	a.Next()
	h.publish(t, entry("a.corp.example", "10.0.0.2"))
	h.publish(t, entry("a.corp.example", "10.0.0.3"))
	r1, r2 := a.Recv(), a.Recv()
	if cptest.Kind(r1) != "delta" || cptest.Kind(r2) != "delta" {
		t.Fatalf("got %s and %s, want two deltas", cptest.Kind(r1), cptest.Kind(r2))
	}
	a.Nack(r1, "rejected")
	if err := a.Apply(r2); err == nil {
		t.Fatal("second delta applied on top of a rejected one")
	}
	a.Nack(r2, "wrong base")
	r := a.Next()
	if diff := cmp.Diff("full", cptest.Kind(r)); diff != "" {
		t.Fatalf("(-want +got):\n%s", diff)
	}
	a.None(200 * time.Millisecond)
	if diff := cmp.Diff(map[string]string{"a.corp.example": "10.0.0.3"}, a.IPs()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	if got := h.metric(t, "meshdns_controlplane_pushes_total", "kind", "full"); got != 2 {
		t.Errorf("full tables sent = %v, want 2 (connect + one repair)", got)
	}
}

func TestResume(t *testing.T) {
	h := newHarness(t, harnessOpts{history: 3})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns"})
	a.Next()
	v1 := a.Version
	a.Close()

	h.publish(t, entry("a.corp.example", "10.0.0.2"))
	v2 := h.views.Lookup(viewKey("ns")).Current().ID

	tests := []struct {
		name     string
		resume   string
		kind     string
		upserted int
	}{
		{name: "version in history gets a delta", resume: v1, kind: "delta", upserted: 1},
		{name: "current version gets an empty delta", resume: v2, kind: "delta", upserted: 0},
		{name: "unknown version gets a full table", resume: "0123456789abcdef", kind: "full", upserted: 0},
		{name: "no version gets a full table", resume: "", kind: "full"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Resume: tc.resume})
			r := b.Recv()
			if diff := cmp.Diff(tc.kind, cptest.Kind(r)); diff != "" {
				t.Fatalf("kind (-want +got):\n%s", diff)
			}
			if tc.kind == "delta" {
				if diff := cmp.Diff(tc.upserted, len(r.GetDelta().GetUpserted())); diff != "" {
					t.Errorf("upserted (-want +got):\n%s", diff)
				}
			}
			if diff := cmp.Diff(v2, r.GetVersionInfo()); diff != "" {
				t.Errorf("version (-want +got):\n%s", diff)
			}
			// The first agent back is v2's canary (staged rollout):
			// answering it releases v2 to the next subtest's agent.
			if err := b.Apply(r); err == nil {
				b.Ack(r)
			}
			waitFor(t, "v2 released", func() bool { return h.metric(t, "meshdns_controlplane_rollout_held_versions") == 0 })
		})
	}

	t.Run("version fell out of the history", func(t *testing.T) {
		for i := range 4 {
			h.publish(t, entry("a.corp.example", "10.0.1."+string(rune('1'+i))))
		}
		b := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Resume: v1})
		if r := b.Recv(); cptest.Kind(r) != "full" {
			t.Errorf("got %s, want full", cptest.Kind(r))
		}
	})
}

func TestDebounceBurstIsOneVersion(t *testing.T) {
	h := newHarness(t, harnessOpts{debounce: 50 * time.Millisecond})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns"})
	a.Next()
	before := h.metric(t, "meshdns_controlplane_versions_total")
	for i := range 100 {
		h.reg.Update("test", registry.Snapshot{Entries: []registry.Entry{entry("a.corp.example", "10.0.2."+itoa(i))}, Zones: []string{"corp.example"}})
	}
	r := a.Next()
	if diff := cmp.Diff(map[string]string{"a.corp.example": "10.0.2.99"}, a.IPs()); diff != "" {
		t.Errorf("table (-want +got):\n%s", diff)
	}
	if cptest.Kind(r) != "delta" {
		t.Errorf("got %s, want delta", cptest.Kind(r))
	}
	a.None(200 * time.Millisecond)
	if got := h.metric(t, "meshdns_controlplane_versions_total") - before; got != 1 {
		t.Errorf("versions for a burst of 100 = %v, want 1", got)
	}
}

func TestNamespaceScoping(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.publish(t,
		entry("public.corp.example", "10.0.0.1"),
		entry("secret.corp.example", "10.0.0.2", "team-a"),
		// One name, two answers: the first entry a namespace may see wins.
		entry("db.corp.example", "10.0.0.3", "team-a"),
		entry("db.corp.example", "10.0.0.4"),
	)
	tests := []struct {
		namespace string
		want      map[string]string
	}{
		{namespace: "team-a", want: map[string]string{"public.corp.example": "10.0.0.1", "secret.corp.example": "10.0.0.2", "db.corp.example": "10.0.0.3"}},
		{namespace: "team-b", want: map[string]string{"public.corp.example": "10.0.0.1", "db.corp.example": "10.0.0.4"}},
	}
	for _, tc := range tests {
		t.Run(tc.namespace, func(t *testing.T) {
			a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: tc.namespace})
			a.Next()
			if diff := cmp.Diff(tc.want, a.IPs()); diff != "" {
				t.Errorf("table (-want +got):\n%s", diff)
			}
			// The zone stays authoritative, so hidden names get NXDOMAIN
			// at the agent instead of leaking upstream.
			if diff := cmp.Diff([]string{"corp.example"}, a.Zones); diff != "" {
				t.Errorf("zones (-want +got):\n%s", diff)
			}
		})
	}
}

func TestMarshalOncePerView(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	// ns-b is named by an entry, so it has a view of its own; ns-a is
	// named by none and gets the shared view.
	onlyB := entry("only-b.corp.example", "10.8.8.8", "ns-b")
	h.publish(t, append(manyEntries(100), onlyB)...)
	var agents []*cptest.Agent
	for i := range 10 {
		ns := "ns-a"
		if i >= 7 {
			ns = "ns-b"
		}
		a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: ns, Pod: "p" + itoa(i)})
		a.Next()
		agents = append(agents, a)
	}
	fullBefore := h.metric(t, "meshdns_controlplane_marshals_total", "kind", "full")
	deltaBefore := h.metric(t, "meshdns_controlplane_marshals_total", "kind", "delta")
	pushesBefore := h.metric(t, "meshdns_controlplane_pushes_total", "kind", "delta")
	es := manyEntries(100)
	es[5] = entry("e5.corp.example", "10.9.9.9")
	h.publish(t, append(es, onlyB)...)
	nextAll(t, agents...)
	for _, a := range agents {
		if got := a.IPs()["e5.corp.example"]; got != "10.9.9.9" {
			t.Fatalf("e5 = %q", got)
		}
	}
	if diff := cmp.Diff(2.0, fullBefore); diff != "" {
		t.Errorf("full encodings for 10 agents in 2 views (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(2.0, h.metric(t, "meshdns_controlplane_marshals_total", "kind", "delta")-deltaBefore); diff != "" {
		t.Errorf("delta encodings for one change, 2 views (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(10.0, h.metric(t, "meshdns_controlplane_pushes_total", "kind", "delta")-pushesBefore); diff != "" {
		t.Errorf("delta pushes (-want +got):\n%s", diff)
	}
}

func TestSlowAgentDoesNotBlockOthers(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	// ~180KB: one full table exceeds the 64KB HTTP/2 stream window, so
	// gRPC's writes to the slow agent stall; the server holds its next
	// versions back instead of queueing them behind it.
	es := manyEntries(3000)
	h.publish(t, es...)
	slow := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: "slow", NoRead: true, Window: 64 << 10})
	fast := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: "fast"})
	fast.Next()
	for i := range 10 {
		es[0] = entry("e0.corp.example", "10.8.0."+itoa(i))
		h.publish(t, es...)
		start := time.Now()
		fast.Next()
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("update %d reached the fast agent after %v", i, d)
		}
		if got := fast.IPs()["e0.corp.example"]; got != "10.8.0."+itoa(i) {
			t.Fatalf("fast agent has e0 = %q", got)
		}
	}
	if got := h.metric(t, "meshdns_controlplane_push_holds_total"); got != 1 {
		t.Errorf("holds = %v, want 1 (held once, until it answers)", got)
	}
	// The slow agent catches up: after the full table in flight it gets
	// the current version in one response.
	go slow.Read()
	var last string
	for last != fast.Version {
		r := slow.Recv()
		if err := slow.Apply(r); err != nil {
			t.Fatalf("slow agent: %v", err)
		}
		slow.Ack(r)
		last = r.GetVersionInfo()
	}
	if diff := cmp.Diff(fast.IPs(), slow.IPs()); diff != "" {
		t.Errorf("slow agent's table (-fast +slow):\n%s", diff)
	}
}

func TestInvalidIdentity(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: ""})
	select {
	case <-a.Resps:
	case <-time.After(5 * time.Second):
		t.Fatal("stream not closed")
	}
	if err := <-a.Errs; err == nil {
		t.Fatal("want an error for a missing namespace")
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}

// TestUnansweredAgentIsHeld: an agent that reads but does not answer gets
// at most 8 responses in flight; versions published after that are not
// sent, and its answer brings it to the current version in one delta.
func TestUnansweredAgentIsHeld(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: "mute"})
	a.Next()
	var got []*meshdnsv1.StreamNameTableResponse
	for i := range 12 {
		h.publish(t, entry("a.corp.example", "10.0.1."+itoa(i)))
		if i < 8 {
			got = append(got, a.Recv()) // unanswered
		}
	}
	a.None(200 * time.Millisecond)
	if got := h.metric(t, "meshdns_controlplane_push_holds_total"); got != 1 {
		t.Errorf("holds = %v, want 1", got)
	}
	for _, r := range got {
		if err := a.Apply(r); err != nil {
			t.Fatal(err)
		}
	}
	a.Ack(got[len(got)-1]) // answers all 8
	r := a.Next()
	if k := cptest.Kind(r); k != "delta" {
		t.Errorf("after the hold: a %s", k)
	}
	if ip := a.IPs()["a.corp.example"]; ip != "10.0.1.11" {
		t.Errorf("a = %q after the hold, want the last version's 10.0.1.11", ip)
	}
	a.None(200 * time.Millisecond)
}
