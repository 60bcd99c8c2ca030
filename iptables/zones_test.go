package iptables

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/testenv"
)

// TestConntrackZones reproduces the UDP conntrack race the raw-table
// zones exist for, with real packets. An app sends from pod:P to the
// nameserver (redirected to the agent's port); then the agent, as its own
// uid, happens to send its upstream query from the same pod:P. Without
// zones the agent's packet matches the app's NAT entry and is redirected
// to the agent itself; with zones it reaches the nameserver.
func TestConntrackZones(t *testing.T) {
	testenv.RequireTool(t, "setpriv")
	families := []zoneCase{
		{f: IPv4, ns: "198.18.0.1", pod: "198.18.0.2", agent: "127.0.0.1", nsCIDR: "198.18.0.1/24", podCIDR: "198.18.0.2/24"},
		{f: IPv6, ns: "fd00:198:18::1", pod: "fd00:198:18::2", agent: "::1", nsCIDR: "fd00:198:18::1/64", podCIDR: "fd00:198:18::2/64"},
	}
	self := copyTestBinary(t)
	for _, b := range []Backend{NFT, Legacy} {
		for _, fam := range families {
			t.Run(string(b)+" "+fam.f.String(), func(t *testing.T) { testZones(t, self, b, fam) })
		}
	}
}

// zoneCase is the addressing of one family in TestConntrackZones.
type zoneCase struct {
	f               Family
	ns, pod, agent  string // nameserver, pod and loopback addresses
	nsCIDR, podCIDR string
}

func testZones(t *testing.T, self string, b Backend, c zoneCase) {
	f, nsIP, podIP, agentIP := c.f, c.ns, c.pod, c.agent
	testenv.RequireTool(t, b.binary(f, "restore"))
	pod, r := newNetns(t)
	dnsNS, _ := newNetns(t)
	// veth names: at most 15 bytes, unique per process and call.
	id := fmt.Sprintf("%d%d", os.Getpid()%100000, netnsSeq.Add(1))
	vp, vd := "mdz"+id+"p", "mdz"+id+"d"
	for _, args := range [][]string{
		{"link", "add", vp, "netns", pod, "type", "veth", "peer", "name", vd, "netns", dnsNS},
		// nodad: IPv6 addresses are usable at once, without duplicate
		// address detection.
		addrAdd(pod, c.podCIDR, vp),
		addrAdd(dnsNS, c.nsCIDR, vd),
		{"-n", pod, "link", "set", vp, "up"},
		{"-n", dnsNS, "link", "set", vd, "up"},
		{"-n", pod, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %q: %v: %s", args, err, out)
		}
	}
	startRole(t, dnsNS, "udpecho", "ADDR="+net.JoinHostPort(nsIP, "53"), "REPLY=upstream")
	startRole(t, pod, "udpecho", "ADDR="+net.JoinHostPort(agentIP, "15053"), "REPLY=agent")

	m, err := New(Config{ProxyUIDs: []uint32{1337}, Nameservers: addrs(nsIP), Backend: b, Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	send := func(asAgent bool, port int) string {
		t.Helper()
		argv := []string{"netns", "exec", pod}
		if asAgent {
			argv = append(argv, "setpriv", "--reuid", "1337", "--regid", "1337", "--clear-groups")
		}
		cmd := exec.CommandContext(ctx, "ip", append(argv, self)...)
		cmd.Env = append(os.Environ(), roleEnv+"=udpsend",
			"SRC="+net.JoinHostPort(podIP, fmt.Sprint(port)), "DST="+net.JoinHostPort(nsIP, "53"))
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("udpsend: %v: %s", err, out)
		}
		return strings.TrimSpace(string(out))
	}

	// Control: the nat rules alone, without the raw-table zones.
	natOnly := ApplyInput(m.Ruleset(f), nil)
	natOnly = natOnly[strings.Index(natOnly, "*nat"):]
	mustRun(t, r, natOnly, b.binary(f, "restore"), "--noflush", "--wait=10")
	if got := send(false, 40001); got != "agent" {
		t.Fatalf("app query reached %q, want the agent", got)
	}
	if got := send(true, 40001); got != "agent" {
		t.Errorf("without zones the agent's query from the app's port reached %q; expected the race to loop it back to the agent", got)
	}
	if err := m.Clean(ctx); err != nil {
		t.Fatal(err)
	}

	// The real rules, and a fresh port: the control's conntrack
	// entries live on for the UDP timeout.
	if err := m.Apply(ctx); err != nil {
		t.Fatal(err)
	}
	if got := send(false, 40002); got != "agent" {
		t.Fatalf("app query reached %q, want the agent", got)
	}
	if got := send(true, 40002); got != "upstream" {
		t.Errorf("with zones the agent's query from the app's port reached %q, want the upstream", got)
	}
	if got := send(true, 40003); got != "upstream" {
		t.Errorf("the agent's query from a fresh port reached %q, want the upstream", got)
	}
}

func addrAdd(netns, cidr, dev string) []string {
	args := []string{"-n", netns, "addr", "add", cidr, "dev", dev}
	if strings.Contains(cidr, ":") {
		args = append(args, "nodad")
	}
	return args
}

// copyTestBinary copies the test binary to a directory every user can
// read, so it can run as the agent's uid.
func copyTestBinary(t testing.TB) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "meshdns-iptables-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "iptables.test")
	if err := os.WriteFile(dst, data, 0o755); err != nil {
		t.Fatal(err)
	}
	return dst
}

// startRole runs the test binary as a helper in a namespace until the test
// ends, and waits for it to print "ready".
func startRole(t testing.TB, netns, role string, env ...string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", netns, self)
	cmd.Env = append(append(os.Environ(), roleEnv+"="+role), env...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ready <- sc.Scan() && sc.Text() == "ready"
		for sc.Scan() {
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("%s helper in %s failed to start", role, netns)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("%s helper in %s did not start", role, netns)
	}
}
