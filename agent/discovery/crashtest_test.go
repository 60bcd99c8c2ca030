//go:build meshdns_crashtest

package discovery

import (
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// The helper process of TestCrashingVersionRejected: a client of the
// control plane at MESHDNS_CRASH_ADDR on the state dir MESHDNS_CRASH_DIR,
// run until the table that crashes it.
func TestCrashHelperProcess(t *testing.T) {
	addr, dir := os.Getenv("MESHDNS_CRASH_ADDR"), os.Getenv("MESHDNS_CRASH_DIR")
	if addr == "" {
		return // not a helper
	}
	c := newClient(t, Config{Addrs: []string{addr}, Apply: (&recorder{}).apply, StateDir: dir, Probation: time.Millisecond})
	c.Run(t.Context())
}

func TestCrashNameMatchesShippedCheck(t *testing.T) {
	if CrashName != crashName {
		t.Fatalf("CrashName %q, the shipped binaries are checked for %q", CrashName, crashName)
	}
}

// A real agent process applies a version holding CrashName and dies of
// it (not a clean stop): the next process serves the last known good
// version and rejects the one that killed its predecessor.
func TestCrashingVersionRejected(t *testing.T) {
	dir := t.TempDir()
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelperProcess$")
	cmd.Env = append(os.Environ(), "MESHDNS_CRASH_ADDR="+srv.Addr, "MESHDNS_CRASH_DIR="+dir)
	var stderr testenv.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	srv.Recv(t)
	srv.Send(full("v1", "n1", table("a.example")))
	checkAck(t, srv.Recv(t), "v1", "n1")
	testenv.Eventually(t, "v1 passes its probation", discoverytest.Patience(t), func() bool { return len(dirNames(t, dir)) == 1 })
	srv.Send(full("v2", "n2", table("a.example", CrashName)))
	if err := cmd.Wait(); err == nil || !strings.Contains(stderr.String(), "meshdns_crashtest: version v2") {
		t.Fatalf("helper: %v, want its death applying v2:\n%s", err, stderr.String())
	}

	rec := &recorder{}
	c := newClient(t, Config{Addrs: []string{srv.Addr}, Apply: rec.apply, StateDir: dir})
	if ok, err := c.Restore(); !ok || err != nil {
		t.Fatalf("Restore = %v, %v", ok, err)
	}
	runUntil(t, c)
	first := srv.Recv(t)
	if first.GetVersionInfo() != "v1" || first.GetRejectedVersion() != "v2" || first.GetErrorDetail().GetCode() != 10 {
		t.Fatalf("first request = %v, want v1 rejecting v2 (ABORTED)", first)
	}
	srv.Send(full("v2", "n3", table("a.example", CrashName)))
	checkAborted(t, srv.Recv(t), "v1", "n3", "the agent died within 1ms of applying version v2; restored v1")
	if diff := cmp.Diff([]string{"v1"}, rec.versions); diff != "" {
		t.Errorf("applied (-want +got)\n%s", diff)
	}
}
