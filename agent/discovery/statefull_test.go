package discovery

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"syscall"
	"testing"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestStateDirFull runs the client on a real tmpfs too small for the
// table, as an injected sidecar whose in-memory state dir is below the
// table's size: every write fails with ENOSPC, yet every table is applied
// and ACKed, a delta applies to the table kept in memory, the failure is
// logged once (and counted every time), and nothing half-written is left
// in the directory.
func TestStateDirFull(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=16k"); err != nil {
		testenv.Unavailable(t, "mount tmpfs: %v", err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })

	big := func(prefix string) []string {
		var names []string
		for i := range 2000 { // ~60 KB in wire form
			names = append(names, fmt.Sprintf("%s-%d.ns.svc.cluster.local", prefix, i))
		}
		return names
	}
	srv := discoverytest.Start(t, "127.0.0.1:0", nil)
	rec := &recorder{}
	c := newClient(t, Config{Addrs: []string{srv.Addr}, Apply: rec.apply, StateDir: dir})
	var logs testenv.Buffer
	c.log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	runClient(t, c)

	srv.Recv(t)
	srv.Send(full("v1", "n1", table("a.example")))
	if got := srv.Recv(t); got.GetVersionInfo() != "v1" || got.GetErrorDetail() != nil {
		t.Fatalf("ack v1 = %v", got)
	}
	// Too big: streamed to the state dir as it is received, the write
	// fails and cuts the stream; the reconnect receives it into memory.
	srv.Send(full("v2", "n2", table(big("b")...)))
	for {
		got := srv.Recv(t)
		if got.GetVersionInfo() == "v2" && got.GetResponseNonce() == "n2" {
			if got.GetErrorDetail() != nil {
				t.Fatalf("v2 NACKed: %v", got.GetErrorDetail())
			}
			break
		}
		// A new stream asks from v1: send v2 again.
		srv.Send(full("v2", "n2", table(big("b")...)))
	}
	srv.Send(full("v3", "n3", table(big("c")...)))
	if got := srv.Recv(t); got.GetVersionInfo() != "v3" || got.GetErrorDetail() != nil {
		t.Fatalf("ack v3 = %v", got)
	}
	srv.Send(delta("v4", "n4", "v3", []string{"d.example"}, []string{"c-0.ns.svc.cluster.local"}))
	if got := srv.Recv(t); got.GetVersionInfo() != "v4" || got.GetErrorDetail() != nil {
		t.Fatalf("ack v4 = %v", got)
	}
	names := rec.names()
	if len(names) != 2000 || !strings.HasPrefix(names[0], "c-") || names[len(names)-1] != "d.example" {
		t.Fatalf("applied table: %d names, first %q last %q", len(names), names[0], names[len(names)-1])
	}
	if got := c.metrics.stateWrites.WithLabelValues("error").Value(); got < 3 {
		t.Errorf("state write errors = %v, want at least 3 (v2 twice, v3, v4)", got)
	}
	testenv.Eventually(t, "the log", discoverytest.Patience(t), func() bool { return strings.Contains(logs.String(), "level=DEBUG msg=\"persist name table\"") })
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
		t.Errorf("%d errors logged, want 1:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "no space left on device") {
		t.Errorf("the error logged does not say why:\n%s", logs.String())
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var entries []string
	for _, e := range ents {
		entries = append(entries, e.Name())
	}
	// v1 and the marker of the probation v4 is on (v1 never passed its
	// own, so there is no last known good to keep).
	if len(entries) != 2 || entries[0] != stateFile || entries[1] != markerFile {
		t.Errorf("state dir holds %v, want only %s (v1's) and %s", entries, stateFile, markerFile)
	}
	if v, _, err := namewire.FileVersion(dir + "/" + stateFile); err != nil || v != "v1" {
		t.Errorf("persisted version = %q, %v; want v1", v, err)
	}
}
