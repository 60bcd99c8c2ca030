package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// agentTable writes a protojson name table of n names svcI.corp.example ->
// 10.7.0.(I+1), authoritative for corp.example, and returns its path and
// the names (FQDN).
func agentTable(t *testing.T, dir string, n int) (string, []string) {
	t.Helper()
	var b strings.Builder
	b.WriteString(`{"table": {`)
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("svc%d.corp.example.", i)
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"svc%d.corp.example": {"ips": ["10.7.0.%d"], "registry": "File"}`, i, i+1)
	}
	b.WriteString(`}, "authoritative_zones": ["corp.example"]}`)
	path := filepath.Join(dir, "table.json")
	testenv.ReplaceFile(t, path, b.String())
	return path, names
}

// TestAgentRestart: 200 lookups/s over UDP for table names while the agent
// process goes away.
//
//   - graceful: a second agent starts with --takeover on the same DNS
//     address, and once it is ready the first gets SIGTERM and drains: no
//     lookup may fail, and the second must be answering afterwards;
//   - crash: the agent is SIGKILLed and started again at once, as a
//     supervisor (systemd Restart=always, the kubelet's first restart)
//     does: lookups must be answered again within 1s of the kill. Those
//     sent while no process holds the port fail fast (on loopback the
//     kernel refuses them); only those the killed process had taken (in
//     its socket queue or being answered) wait for the client's timeout,
//     a handful at 200/s (at most 10 allowed).
func TestAgentRestart(t *testing.T) {
	bin := buildMeshdns(t)
	t.Run("graceful", func(t *testing.T) {
		dir := t.TempDir()
		table, names := agentTable(t, dir, 8)
		up := startFaultUpstream(t)
		dnsAddr := testenv.FreeAddr(t)
		args := func(admin string, extra ...string) []string {
			return append([]string{"agent", "--nametable-file", table, "--dns-addr", dnsAddr, "--admin-addr", admin,
				"--upstream", up, "--resolv-conf", filepath.Join(dir, "resolv.conf"), "--log-level", "warn"}, extra...)
		}
		testenv.ReplaceFile(t, filepath.Join(dir, "resolv.conf"), "nameserver 127.0.0.1\n")
		admin1, admin2 := testenv.FreeAddr(t), testenv.FreeAddr(t)
		old := startProcess(t, bin, args(admin1)...)
		awaitHTTP(t, "http://"+admin1+"/healthz/ready", 200)

		loop := startQueryLoop(t, dnsAddr, names)
		time.Sleep(500 * time.Millisecond)
		// Without --takeover the address is taken: the loud failure stays.
		taken := startProcess(t, bin, args(testenv.FreeAddr(t))...)
		select {
		case <-taken.done:
		case <-time.After(10 * time.Second):
			t.Fatal("a second agent without --takeover started on a taken address")
		}
		successor := startProcess(t, bin, args(admin2, "--takeover")...)
		awaitHTTP(t, "http://"+admin2+"/healthz/ready", 200)
		time.Sleep(300 * time.Millisecond) // both serve
		start := time.Now()
		if err := old.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-old.done:
		case <-time.After(10 * time.Second):
			t.Fatal("old agent did not stop within 10s of SIGTERM")
		}
		t.Logf("old agent drained and exited %v after SIGTERM", time.Since(start).Round(time.Millisecond))
		time.Sleep(time.Second)
		before := agentMetric(admin2, "meshdns_dns_requests_total")
		time.Sleep(300 * time.Millisecond)
		c := loop.stop()
		t.Logf("graceful upgrade: %d lookups, %d failed (%v)", c.sent, c.failed, c.firstErr)
		if c.failed != 0 {
			t.Errorf("%d of %d lookups failed across the graceful upgrade; first: %v", c.failed, c.sent, c.firstErr)
		}
		if after := agentMetric(admin2, "meshdns_dns_requests_total"); after <= before {
			t.Errorf("the successor answered nothing after the old agent left (%v -> %v)", before, after)
		}
		_ = successor
	})
	t.Run("crash under --supervise", func(t *testing.T) {
		dir := t.TempDir()
		table, names := agentTable(t, dir, 8)
		up := startFaultUpstream(t)
		dnsAddr, admin := testenv.FreeAddr(t), testenv.FreeAddr(t)
		testenv.ReplaceFile(t, filepath.Join(dir, "resolv.conf"), "nameserver 127.0.0.1\n")
		sup := startProcess(t, bin, "agent", "--supervise", "--nametable-file", table, "--dns-addr", dnsAddr,
			"--admin-addr", admin, "--upstream", up, "--resolv-conf", filepath.Join(dir, "resolv.conf"), "--log-level", "warn")
		awaitHTTP(t, "http://"+admin+"/healthz/ready", 200)
		loop := startQueryLoop(t, dnsAddr, names)
		time.Sleep(500 * time.Millisecond)
		child := childPID(t, sup.cmd.Process.Pid)
		if child <= 0 {
			t.Fatal("the supervisor has no agent process")
		}
		before := loop.counts()
		kill := time.Now()
		if err := syscall.Kill(child, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		var back time.Duration
		for {
			if c := childPID(t, sup.cmd.Process.Pid); c != child && c != 0 {
				if err := lookup(dnsAddr, names[0], "10.7.0.1"); err == nil {
					back = time.Since(kill)
					break
				}
			}
			if time.Since(kill) > 10*time.Second {
				t.Fatal("no new agent serving within 10s of the kill")
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(time.Second)
		c := loop.stop()
		t.Logf("crash under --supervise: served again %v after SIGKILL; %d lookups meanwhile failed, %d by timeout (%v)",
			back.Round(time.Millisecond), c.failed-before.failed, loop.timeouts.Load(), c.firstErr)
		if back > time.Second {
			t.Errorf("served again %v after the kill, want within 1s", back)
		}
		// The sockets lived on: what was sent meanwhile waited in their
		// queue, at most the query the dying agent was answering is lost.
		if failed := c.failed - before.failed; failed > 1 {
			t.Errorf("%d lookups failed across the crash, want at most the one being answered", failed)
		}
		if err := sup.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case <-sup.done:
		case <-time.After(10 * time.Second):
			t.Fatal("supervisor did not exit within 10s of SIGTERM")
		}
	})
	t.Run("crash", func(t *testing.T) {
		dir := t.TempDir()
		table, names := agentTable(t, dir, 8)
		up := startFaultUpstream(t)
		dnsAddr, admin := testenv.FreeAddr(t), testenv.FreeAddr(t)
		testenv.ReplaceFile(t, filepath.Join(dir, "resolv.conf"), "nameserver 127.0.0.1\n")
		args := []string{"agent", "--nametable-file", table, "--dns-addr", dnsAddr, "--admin-addr", admin,
			"--upstream", up, "--resolv-conf", filepath.Join(dir, "resolv.conf"), "--log-level", "warn"}
		p := startProcess(t, bin, args...)
		awaitHTTP(t, "http://"+admin+"/healthz/ready", 200)
		loop := startQueryLoop(t, dnsAddr, names)
		time.Sleep(500 * time.Millisecond)
		before := loop.counts()
		kill := time.Now()
		p.kill(t)
		killed := time.Now()
		p = startProcess(t, bin, args...)
		// Served again: one lookup answered after the restart.
		var back time.Duration
		for {
			if err := lookup(dnsAddr, names[0], "10.7.0.1"); err == nil {
				back = time.Since(kill)
				break
			}
			if time.Since(kill) > 10*time.Second {
				t.Fatal("not served within 10s of the kill")
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(time.Second)
		c := loop.stop()
		failed := c.failed - before.failed
		t.Logf("crash: served again %v after SIGKILL; %d lookups meanwhile failed, %d of them by timeout (%v)",
			back.Round(time.Millisecond), failed, loop.timeouts.Load(), c.firstErr)
		if back > time.Second {
			t.Errorf("served again %v after the kill, want within 1s", back)
		}
		// Only lookups the killed agent had taken (queued in its socket,
		// more of them the busier the machine) may wait for their timeout:
		// once it is gone, a lookup is refused at once or answered by the
		// new agent.
		if n := loop.timeoutsSentAfter(killed); n > 0 {
			t.Errorf("%d lookups sent after the agent was gone waited for their timeout", n)
		}
	})
}

// childPID returns the first child process of pid, 0 when it has none.
// The kernel lists a child under the thread that forked it, so every
// thread's list is read.
func childPID(t *testing.T, pid int) int {
	t.Helper()
	lists, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/children", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range lists {
		b, err := os.ReadFile(l)
		if err != nil {
			continue // the thread ended
		}
		if f := strings.Fields(string(b)); len(f) > 0 {
			n, _ := strconv.Atoi(f[0])
			return n
		}
	}
	return 0
}
