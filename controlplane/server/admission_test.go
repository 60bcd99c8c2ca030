package server_test

import (
	"testing"
	"time"

	"github.com/meshdns/meshdns/controlplane/internal/cptest"
)

// TestAdmissionPacing: with one admission slot, a second agent waits until
// the first has answered its first table, then is served; the wait shows
// in meshdns_controlplane_admission_waiting.
func TestAdmissionPacing(t *testing.T) {
	h := newHarness(t, harnessOpts{admissions: 1})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	first := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: "first"})
	r := first.Recv() // read, not yet answered: the slot stays taken
	second := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns", Pod: "second"})
	waitFor(t, "second agent waiting", func() bool { return h.metric(t, "meshdns_controlplane_admission_waiting") == 1 })
	second.None(200 * time.Millisecond)
	if err := first.Apply(r); err != nil {
		t.Fatal(err)
	}
	first.Ack(r)
	if got := second.Next(); got.GetFull() == nil {
		t.Fatalf("second agent got %v, want a full table", got)
	}
	if got := second.IPs()["a.corp.example"]; got != "10.0.0.1" {
		t.Errorf("second agent has a = %q", got)
	}
	if got := h.metric(t, "meshdns_controlplane_admission_waiting"); got != 0 {
		t.Errorf("admission_waiting = %v after both were served", got)
	}
}
