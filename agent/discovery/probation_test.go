package discovery

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// runUntil runs c until the returned stop, a clean shutdown, or the end
// of the test.
func runUntil(t testing.TB, c *Client) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	var stopped bool
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// crashCopy copies the state dir as a process killed now leaves it: every
// file is written whole and fsynced before it is renamed into the
// directory, so the copy of a quiet directory is what a restart finds.
func crashCopy(t testing.TB, dir string) string {
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
		if err := os.WriteFile(filepath.Join(out, e.Name()), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// checkAck fails unless req ACKs version (nonce "" for any).
func checkAck(t testing.TB, req *meshdnsv1.StreamNameTableRequest, version, nonce string) {
	t.Helper()
	if req.GetVersionInfo() != version || (nonce != "" && req.GetResponseNonce() != nonce) || req.GetErrorDetail() != nil {
		t.Fatalf("request = %v, want the ACK of %s %s", req, version, nonce)
	}
}

// checkAborted fails unless req NACKs nonce's response with ABORTED and
// the reason the agent died, holding version.
func checkAborted(t testing.TB, req *meshdnsv1.StreamNameTableRequest, version, nonce, reason string) {
	t.Helper()
	d := req.GetErrorDetail()
	if req.GetVersionInfo() != version || req.GetResponseNonce() != nonce || d.GetCode() != 10 || d.GetMessage() != reason {
		t.Fatalf("request = %v, want a NACK of %s code 10 %q keeping %s", req, nonce, reason, version)
	}
}

// A version becomes the last known good only once it was served for the
// probation without the process dying. v1 passes its probation; v2, during
// its own, is the state a killed process leaves: the next start serves v1,
// says in its first request that it rejected v2 (ABORTED, with why), NACKs
// v2 when the control plane sends it again, in full or as a delta, and
// says so again after a clean restart, until the control plane sends v3.
func TestDeathDuringProbationRestoresLastKnownGood(t *testing.T) {
	dir := t.TempDir()
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)

	c1 := newClient(t, Config{Addrs: []string{srv.Addr}, Apply: (&recorder{}).apply, StateDir: dir, Probation: time.Millisecond})
	stop1 := runUntil(t, c1)
	srv.Recv(t)
	srv.Send(full("v1", "n1", table("a.example")))
	checkAck(t, srv.Recv(t), "v1", "n1")
	testenv.Eventually(t, "v1 passes its probation", discoverytest.Patience(t), func() bool {
		names := dirNames(t, dir)
		return len(names) == 1 && names[0] == stateFile
	})
	stop1()

	c2 := newClient(t, Config{Addrs: []string{srv.Addr}, Apply: (&recorder{}).apply, StateDir: dir, Probation: time.Hour})
	if ok, err := c2.Restore(); !ok || err != nil {
		t.Fatalf("Restore = %v, %v", ok, err)
	}
	stop2 := runUntil(t, c2)
	checkAck(t, srv.Recv(t), "v1", "")
	srv.Send(full("v2", "n2", table("a.example", "b.example")))
	checkAck(t, srv.Recv(t), "v2", "n2")
	crashed := crashCopy(t, dir) // killed here, within v2's probation
	stop2()

	rec := &recorder{}
	c3 := newClient(t, Config{Addrs: []string{srv.Addr}, Apply: rec.apply, StateDir: crashed, Probation: time.Hour})
	if ok, err := c3.Restore(); !ok || err != nil {
		t.Fatalf("Restore after the death = %v, %v", ok, err)
	}
	if diff := cmp.Diff([]string{"a.example"}, rec.names()); diff != "" {
		t.Errorf("restored names (-want +got): the last known good v1\n%s", diff)
	}
	reason := "the agent died within 1h0m0s of applying version v2; restored v1"
	stop3 := runUntil(t, c3)
	first := srv.Recv(t)
	if first.GetVersionInfo() != "v1" || first.GetRejectedVersion() != "v2" || first.GetErrorDetail().GetCode() != 10 || first.GetErrorDetail().GetMessage() != reason {
		t.Fatalf("first request = %v, want v1 rejecting v2 with ABORTED %q", first, reason)
	}
	srv.Send(full("v2", "n3", table("a.example", "b.example")))
	checkAborted(t, srv.Recv(t), "v1", "n3", reason)
	srv.Send(delta("v2", "n4", "v1", []string{"b.example"}, nil))
	checkAborted(t, srv.Recv(t), "v1", "n4", reason)
	stop3()

	// Persisted: a clean restart still rejects v2.
	rec4 := &recorder{}
	c4 := newClient(t, Config{Addrs: []string{srv.Addr}, Apply: rec4.apply, StateDir: crashed, Probation: time.Hour})
	if ok, err := c4.Restore(); !ok || err != nil {
		t.Fatalf("Restore = %v, %v", ok, err)
	}
	runUntil(t, c4)
	if first := srv.Recv(t); first.GetRejectedVersion() != "v2" || first.GetErrorDetail().GetCode() != 10 {
		t.Fatalf("first request after a clean restart = %v, want v2 still rejected", first)
	}
	srv.Send(full("v2", "n5", table("a.example", "b.example")))
	checkAborted(t, srv.Recv(t), "v1", "n5", reason)
	srv.Send(full("v3", "n6", table("c.example")))
	checkAck(t, srv.Recv(t), "v3", "n6")
	if diff := cmp.Diff([]string{"v1", "v3"}, rec4.versions); diff != "" {
		t.Errorf("applied versions (-want +got): v2 never again\n%s", diff)
	}
	srv.DropStream()
	if first := srv.Recv(t); first.GetVersionInfo() != "v3" || first.GetRejectedVersion() != "" || first.GetErrorDetail() != nil {
		t.Errorf("first request after v3 = %v, want v3 and no rejection", first)
	}
	if _, err := os.Stat(filepath.Join(crashed, rejectedFile)); !os.IsNotExist(err) {
		t.Errorf("the rejection outlives v3: %v", err)
	}
}

// A process that dies inside Apply (the version crashes the agent as it
// is built) never committed the version's state file, yet the next start
// rejects it: the probation begins before Apply.
func TestDeathWhileApplyingRejects(t *testing.T) {
	dir := t.TempDir()
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	rec := &recorder{}
	var crashed string
	apply := func(v *Version) error {
		if v.ID() == "v2" {
			crashed = crashCopy(t, dir) // the process dies here
		}
		return rec.apply(v)
	}
	c := newClient(t, Config{Addrs: []string{srv.Addr}, Apply: apply, StateDir: dir, Probation: time.Millisecond})
	runUntil(t, c)
	srv.Recv(t)
	srv.Send(full("v1", "n1", table("a.example")))
	checkAck(t, srv.Recv(t), "v1", "n1")
	testenv.Eventually(t, "v1 passes its probation", discoverytest.Patience(t), func() bool { return len(dirNames(t, dir)) == 1 })
	srv.Send(delta("v2", "n2", "v1", []string{"b.example"}, nil))
	checkAck(t, srv.Recv(t), "v2", "n2")

	rec2 := &recorder{}
	c2 := newClient(t, Config{Addrs: []string{deadAddr(t)}, Apply: rec2.apply, StateDir: crashed})
	if ok, err := c2.Restore(); !ok || err != nil {
		t.Fatalf("Restore = %v, %v", ok, err)
	}
	if diff := cmp.Diff([]string{"v1"}, rec2.versions); diff != "" {
		t.Errorf("restored (-want +got)\n%s", diff)
	}
	if r := c2.prob.rejectedVersion(); r.Version != "v2" || !strings.Contains(r.Message, "within 1ms of applying version v2; restored v1") {
		t.Errorf("rejected = %+v, want v2", r)
	}
}

// A death within the probation of the first version has no last known good
// to fall back to: rejecting the version would leave the pod with no table,
// so the version is restored and its probation starts over.
func TestDeathDuringFirstProbationServesItAgain(t *testing.T) {
	dir := t.TempDir()
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	c := newClient(t, Config{Addrs: []string{srv.Addr}, Apply: (&recorder{}).apply, StateDir: dir})
	runUntil(t, c)
	srv.Recv(t)
	srv.Send(full("v1", "n1", table("a.example")))
	checkAck(t, srv.Recv(t), "v1", "n1")
	crashed := crashCopy(t, dir)

	c2 := newClient(t, Config{Addrs: []string{srv.Addr}, Apply: (&recorder{}).apply, StateDir: crashed})
	if ok, err := c2.Restore(); !ok || err != nil {
		t.Fatalf("Restore = %v, %v; want v1 restored", ok, err)
	}
	runUntil(t, c2)
	first := srv.Recv(t)
	if first.GetVersionInfo() != "v1" || first.GetRejectedVersion() != "" || first.GetErrorDetail() != nil {
		t.Errorf("first request = %v, want v1 held and nothing rejected", first)
	}
	if diff := cmp.Diff([]string{stateFile, markerFile}, dirNames(t, crashed)); diff != "" {
		t.Errorf("state dir (-want +got)\n%s", diff)
	}
}

// A clean shutdown within the probation is no death: the restart serves
// the version and resumes its probation, and a death then still falls
// back to the last known good.
func TestCleanStopResumesProbation(t *testing.T) {
	dir := t.TempDir()
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	c1 := newClient(t, Config{Addrs: []string{srv.Addr}, Apply: (&recorder{}).apply, StateDir: dir, Probation: time.Millisecond})
	stop1 := runUntil(t, c1)
	srv.Recv(t)
	srv.Send(full("v1", "n1", table("a.example")))
	checkAck(t, srv.Recv(t), "v1", "n1")
	testenv.Eventually(t, "v1 passes its probation", discoverytest.Patience(t), func() bool { return len(dirNames(t, dir)) == 1 })
	stop1()

	c2 := newClient(t, Config{Addrs: []string{srv.Addr}, Apply: (&recorder{}).apply, StateDir: dir, Probation: time.Hour})
	c2.Restore()
	stop2 := runUntil(t, c2)
	srv.Recv(t)
	srv.Send(full("v2", "n2", table("b.example")))
	checkAck(t, srv.Recv(t), "v2", "n2")
	stop2()

	rec := &recorder{}
	c3 := newClient(t, Config{Addrs: []string{srv.Addr}, Apply: rec.apply, StateDir: dir, Probation: time.Hour})
	if ok, err := c3.Restore(); !ok || err != nil || rec.versions[0] != "v2" {
		t.Fatalf("Restore = %v, %v, %v; want v2", ok, err, rec.versions)
	}
	runUntil(t, c3)
	if first := srv.Recv(t); first.GetVersionInfo() != "v2" || first.GetRejectedVersion() != "" {
		t.Fatalf("first request = %v, want v2 and no rejection", first)
	}
	crashed := crashCopy(t, dir)
	rec4 := &recorder{}
	c4 := newClient(t, Config{Addrs: []string{deadAddr(t)}, Apply: rec4.apply, StateDir: crashed})
	if ok, err := c4.Restore(); !ok || err != nil || rec4.versions[0] != "v1" {
		t.Fatalf("Restore after a death in the resumed probation = %v, %v, %v; want v1", ok, err, rec4.versions)
	}
	if v, _, err := namewire.FileVersion(filepath.Join(crashed, stateFile)); err != nil || v != "v1" {
		t.Errorf("state file = %q, %v; want v1", v, err)
	}
}

// A panic in Apply that unwinds through Run is a death, not a clean stop:
// the marker is left as it was, and the next start rejects the version.
func TestPanicThroughRunIsADeath(t *testing.T) {
	dir := t.TempDir()
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	rec := &recorder{}
	apply := func(v *Version) error {
		if v.ID() == "v2" {
			panic("the version trips a bug")
		}
		return rec.apply(v)
	}
	c := newClient(t, Config{Addrs: []string{srv.Addr}, Apply: apply, StateDir: dir, Probation: time.Millisecond})
	died := make(chan any, 1)
	go func() {
		defer func() { died <- recover() }()
		c.Run(context.Background())
	}()
	srv.Recv(t)
	srv.Send(full("v1", "n1", table("a.example")))
	checkAck(t, srv.Recv(t), "v1", "n1")
	testenv.Eventually(t, "v1 passes its probation", discoverytest.Patience(t), func() bool { return len(dirNames(t, dir)) == 1 })
	srv.Send(full("v2", "n2", table("b.example")))
	if r := <-died; r == nil {
		t.Fatal("Run returned without the panic")
	}
	srv.Stop() // the dead process's connection goes with it

	rec2 := &recorder{}
	c2 := newClient(t, Config{Addrs: []string{deadAddr(t)}, Apply: rec2.apply, StateDir: dir})
	if ok, err := c2.Restore(); !ok || err != nil || rec2.versions[0] != "v1" {
		t.Fatalf("Restore = %v, %v, %v; want v1", ok, err, rec2.versions)
	}
	if r := c2.prob.rejectedVersion(); r.Version != "v2" {
		t.Errorf("rejected = %+v, want v2", r)
	}
}
