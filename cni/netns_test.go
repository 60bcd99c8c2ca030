package cni

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/meshdns/meshdns/iptables"
)

// TestAddInNetNS runs the plugin's ADD with the real runner: the rules land
// in the network namespace of CNI_NETNS, and the calling process (the node)
// stays in its own.
func TestAddInNetNS(t *testing.T) {
	testenv.RequireRoot(t)
	testenv.RequireTool(t, "ip")
	testenv.RequireTool(t, "iptables-legacy-save")
	name := fmt.Sprintf("mdcni-%d", os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	path := "/run/netns/" + name

	// The runner executes in the namespace: the child's /proc/self/ns/net
	// is the namespace file's inode, and the test's own thread is back.
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	own, err := os.Readlink("/proc/thread-self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	out, err := NetNSRunner{Path: path}.Run(context.Background(), nil, "readlink", "/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(string(out)), fmt.Sprintf("net:[%d]", st.Ino); got != want {
		t.Fatalf("runner ran in %s, want %s", got, want)
	}
	if after, _ := os.Readlink("/proc/thread-self/ns/net"); after != own {
		t.Fatalf("the caller's namespace changed from %s to %s", own, after)
	}
	if _, err := (NetNSRunner{Path: "/run/netns/none"}).Run(context.Background(), nil, "true"); err == nil {
		t.Fatal("a missing namespace is no error")
	}

	hostBefore, _ := exec.Command("iptables-legacy-save", "-t", "nat").Output()
	p, err := New(Config{Pods: func(context.Context, string, string, string) (map[string]string, error) {
		return map[string]string{AnnotationRedirect: Redirect{ProxyUID: 1337, ProxyGID: 1337, DNSPort: 15053}.String()}, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	args := Args{Command: "ADD", NetNS: path, ContainerID: "c", Namespace: "demo", Pod: "app"}
	var stdout bytes.Buffer
	if err := p.Exec(context.Background(), args, netConf(t, nil), &stdout); err != nil {
		t.Fatal(err)
	}
	if stdout.String() != prevResult {
		t.Errorf("stdout %q, want prevResult", stdout.String())
	}
	in := iptables.ExecRunner{Prefix: []string{"ip", "netns", "exec", name}}
	rules, err := in.Run(context.Background(), nil, "iptables-legacy-save", "-t", "nat")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(rules), "-j REDIRECT --to-ports 15053") || !strings.Contains(string(rules), "--uid-owner 1337") {
		t.Errorf("the pod's namespace lacks the redirect:\n%s", rules)
	}
	if hostAfter, _ := exec.Command("iptables-legacy-save", "-t", "nat").Output(); strings.Count(string(hostAfter), "meshdns") != strings.Count(string(hostBefore), "meshdns") {
		t.Errorf("the node's own rules changed")
	}
	// CHECK sees the rules in place.
	args.Command = "CHECK"
	if err := p.Exec(context.Background(), args, netConf(t, nil), &stdout); err != nil {
		t.Errorf("CHECK: %v", err)
	}
}
