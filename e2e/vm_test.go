package e2e

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// vmResolvConf is the "VM's" resolver configuration before meshdns: odd on
// purpose (comment, no final newline) so a restore that is not byte for
// byte shows.
const vmResolvConf = "# VM resolver, from DHCP\n" +
	"search demo.svc.cluster.local corp.example\n" +
	"nameserver " + upstreamIP + "\n" +
	"options ndots:1 timeout:1 attempts:2"

// TestVM is the end-to-end test of VM mode: the pod namespace of
// the capture topology plays a VM whose /etc/resolv.conf is its own file
// (ip netns exec bind-mounts /etc/netns/NAME/resolv.conf over it), and the
// cluster namespace plays the VM's original resolver. setup.sh points the
// VM at the agent on 127.0.0.1:53, unmodified getent resolves cluster names
// from the agent's table and other names through the original resolver,
// and uninstall.sh puts the original file back byte for byte.
func TestVM(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"ip", "dig", "getent", "setpriv", "bash"} {
		testenv.RequireTool(t, tool)
	}
	meshdns := buildMeshdns(t)
	tp := newTopology(t)
	table := writeTable(t, tp.dir)
	resolvPath := filepath.Join("/etc/netns", tp.pod, "resolv.conf")
	if err := os.WriteFile(resolvPath, []byte(vmResolvConf), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(tp.dir, "var-lib-meshdns")
	scripts, err := filepath.Abs(filepath.Join("..", "examples", "vm"))
	if err != nil {
		t.Fatal(err)
	}
	script := func(name string) {
		t.Helper()
		out, err := tp.inPod([]string{"STATE_DIR=" + state}, "bash", filepath.Join(scripts, name), "--no-systemd")
		if err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
	}
	// Whatever happens, leave the namespace's file as it was.
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(state, "resolv.conf.orig")); err == nil {
			_, _ = tp.inPod([]string{"STATE_DIR=" + state}, "bash", filepath.Join(scripts, "uninstall.sh"), "--no-systemd")
		}
	})

	// Before: the VM resolves through its original resolver.
	expectGetent(t, tp, "hosts", "web.demo.svc.cluster.local", upstreamWeb)

	script("setup.sh")
	got := readFile(t, resolvPath)
	for _, line := range []string{"nameserver 127.0.0.1", "search demo.svc.cluster.local corp.example", "options ndots:1 timeout:1 attempts:2"} {
		if !strings.Contains(got, line+"\n") {
			t.Errorf("resolv.conf after setup lacks %q:\n%s", line, got)
		}
	}
	if strings.Contains(got, upstreamIP) {
		t.Errorf("resolv.conf after setup still names the original resolver:\n%s", got)
	}
	if diff := cmp.Diff(vmResolvConf, readFile(t, filepath.Join(state, "resolv.conf"))); diff != "" {
		t.Errorf("saved upstream resolv.conf (-want +got):\n%s", diff)
	}
	args := unitArgs(t, state)

	t.Run("before the first table names are forwarded", func(t *testing.T) {
		// A control plane that is not there: the agent has no table.
		agent := tp.startInPod(t, 0, "vm-agent-notable.log", nil, meshdns,
			append(args, "--control-plane", "127.0.0.1:9", "--namespace", "demo")...)
		waitListening(t, tp)
		expectGetent(t, tp, "hosts", "external.example.org", externalIP)
		// A cluster name without a table is SERVFAIL, never a false
		// NXDOMAIN; getent reports it as a failure, and the original
		// resolver's answer must not leak through either.
		if out, err := tp.inPod(nil, "getent", "hosts", "web.demo.svc.cluster.local"); err == nil {
			t.Errorf("getent of a cluster name before the first table = %q, want a failure", out)
		}
		stop(agent)
	})

	t.Run("cluster names from the table, others forwarded", func(t *testing.T) {
		tp.startInPod(t, 0, "vm-agent.log", nil, meshdns, append(args, "--nametable-file", table, "--namespace", "demo")...)
		waitListening(t, tp)
		deadline := time.Now().Add(20 * time.Second)
		for {
			out, _ := tp.inPod(nil, "dig", "@127.0.0.1", "+time=1", "+tries=1", "+short", "web.demo.svc.cluster.local.")
			if strings.TrimSpace(out) == tableWebIP {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("agent on 127.0.0.1:53 not answering from its table (last %q)", out)
			}
			time.Sleep(200 * time.Millisecond)
		}
		n := tp.queries.len()
		expectGetent(t, tp, "hosts", "web.demo.svc.cluster.local", tableWebIP)
		expectGetent(t, tp, "hosts", "web", tableWebIP) // through the kept search list
		expectGetent(t, tp, "ahosts", "api.wild.example.com", tableWildIP)
		lines, _ := tp.queries.since(n)
		for _, l := range lines {
			if strings.Contains(l, "cluster.local") || strings.Contains(l, "wild.example.com") {
				t.Errorf("the original resolver saw a query the table answers: %s", l)
			}
		}
		n = tp.queries.len()
		expectGetent(t, tp, "hosts", "external.example.org", externalIP)
		lines, _ = tp.queries.since(n)
		if !containsPrefix(lines, "query udp "+podIP+" external.example.org. A") {
			t.Errorf("the original resolver did not see the forwarded query; it saw %q", lines)
		}
	})

	script("uninstall.sh")
	if diff := cmp.Diff(vmResolvConf, readFile(t, resolvPath)); diff != "" {
		t.Errorf("resolv.conf after uninstall is not the original (-want +got):\n%s", diff)
	}
	for _, f := range []string{"resolv.conf", "resolv.conf.orig", "resolv.conf.mode"} {
		if _, err := os.Stat(filepath.Join(state, f)); !os.IsNotExist(err) {
			t.Errorf("%s left in the state dir (%v)", f, err)
		}
	}
	// After: the original resolver answers again.
	expectGetent(t, tp, "hosts", "web.demo.svc.cluster.local", upstreamWeb)
}

// unitArgs returns the agent arguments of examples/vm/meshdns-agent.service,
// with /var/lib/meshdns moved to state, so the test runs what the unit runs.
func unitArgs(t *testing.T, state string) []string {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "examples", "vm", "meshdns-agent.service"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		cmd, ok := strings.CutPrefix(sc.Text(), "ExecStart=")
		if !ok {
			continue
		}
		fields := strings.Fields(strings.ReplaceAll(cmd, "/var/lib/meshdns", state))
		if len(fields) < 2 || fields[1] != "agent" {
			t.Fatalf("ExecStart %q does not run meshdns agent", cmd)
		}
		return fields[1:]
	}
	t.Fatal("no ExecStart in meshdns-agent.service")
	return nil
}

// waitListening waits until something accepts TCP on 127.0.0.1:53 in the
// VM namespace.
func waitListening(t *testing.T, tp *topology) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, err := tp.inPod(nil, "bash", "-c", "exec 3<>/dev/tcp/127.0.0.1/53"); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("agent not listening on 127.0.0.1:53 after 20s")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func containsPrefix(lines []string, prefix string) bool {
	for _, l := range lines {
		if strings.HasPrefix(l, prefix) {
			return true
		}
	}
	return false
}
