package agent

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
)

// copyDir copies the state dir as a process killed now leaves it (every
// file in it was fsynced and renamed in whole).
func copyDir(t testing.TB, dir string) string {
	t.Helper()
	out := t.TempDir()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, out, e.Name(), string(b))
	}
	return out
}

// An agent killed within the probation of v2 is restarted on v1, the last
// known good, and answers from it; it tells the control plane it rejected
// v2, NACKs v2 when it comes again, and applies v3.
func TestDeathInProbationServesLastKnownGood(t *testing.T) {
	up := startUpstream(t)
	cp := discoverytest.Start(t, "127.0.0.1:0", nil)
	state := t.TempDir()
	a := startAgent(t, Config{ControlPlanes: []string{cp.Addr}, StateDir: state, Upstreams: []string{up.addr}, Probation: time.Millisecond})
	cp.Recv(t)
	cp.Send(discoverytest.Full("v1", "n1", cpTable(map[string]string{"a.demo.svc.cluster.local": "10.1.0.1"})))
	if ack := cp.Recv(t); ack.GetVersionInfo() != "v1" || ack.GetErrorDetail() != nil {
		t.Fatalf("ack = %v", ack)
	}
	eventually(t, "v1 passes its probation", func() bool {
		ents, err := os.ReadDir(state)
		return err == nil && len(ents) == 1
	})
	a.stop()

	b := startAgent(t, Config{ControlPlanes: []string{cp.Addr}, StateDir: state, Upstreams: []string{up.addr}, Probation: time.Hour})
	cp.Recv(t)
	cp.Send(discoverytest.Full("v2", "n2", cpTable(map[string]string{"a.demo.svc.cluster.local": "10.1.0.2"})))
	if ack := cp.Recv(t); ack.GetVersionInfo() != "v2" || ack.GetErrorDetail() != nil {
		t.Fatalf("ack = %v", ack)
	}
	crashed := copyDir(t, state) // killed within v2's probation
	b.stop()

	c := startAgent(t, Config{ControlPlanes: []string{cp.Addr}, StateDir: crashed, Upstreams: []string{up.addr}, Probation: time.Hour})
	query := func() []string { return answerData(exchange(t, "udp", c.dns, "a.demo.svc.cluster.local", dns.TypeA)) }
	first := cp.Recv(t)
	reason := "the agent died within 1h0m0s of applying version v2; restored v1"
	if first.GetVersionInfo() != "v1" || first.GetRejectedVersion() != "v2" || first.GetErrorDetail().GetCode() != 10 || first.GetErrorDetail().GetMessage() != reason {
		t.Fatalf("first request = %v, want v1 rejecting v2 (ABORTED, %q)", first, reason)
	}
	if diff := cmp.Diff([]string{"a.demo.svc.cluster.local. A 10.1.0.1"}, query()); diff != "" {
		t.Errorf("answer after the death (-want +got): v1's\n%s", diff)
	}
	cp.Send(discoverytest.Full("v2", "n3", cpTable(map[string]string{"a.demo.svc.cluster.local": "10.1.0.2"})))
	if nack := cp.Recv(t); nack.GetVersionInfo() != "v1" || nack.GetErrorDetail().GetCode() != 10 || nack.GetErrorDetail().GetMessage() != reason {
		t.Fatalf("reply to v2 again = %v, want an ABORTED NACK keeping v1", nack)
	}
	if diff := cmp.Diff([]string{"a.demo.svc.cluster.local. A 10.1.0.1"}, query()); diff != "" {
		t.Errorf("answer after v2 again (-want +got): still v1's\n%s", diff)
	}
	cp.Send(discoverytest.Full("v3", "n4", cpTable(map[string]string{"a.demo.svc.cluster.local": "10.1.0.3"})))
	if ack := cp.Recv(t); ack.GetVersionInfo() != "v3" || ack.GetErrorDetail() != nil {
		t.Fatalf("ack of v3 = %v", ack)
	}
	eventually(t, "v3 served", func() bool { return len(query()) == 1 && query()[0] == "a.demo.svc.cluster.local. A 10.1.0.3" })
}
