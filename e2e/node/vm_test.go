package node

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/nodetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// The VM's network: a veth pair between the machine and a namespace that
// stands for the node host, so the host's own /etc/resolv.conf is never
// touched. The host reaches nothing beyond this link.
const (
	vmHostAddr = "10.250.9.1"
	vmAddr     = "10.250.9.2"
)

// testVM runs the VM mode's setup script on "the node host": a network
// namespace with the node's own resolv.conf (ip netns exec mounts
// /etc/netns/NAME/resolv.conf over /etc/resolv.conf), reaching the control
// plane and the cluster DNS on the node address. The agent runs with the
// arguments of the systemd unit, streams its table from the same control
// plane as the pods, and resolves the same names for unmodified getent and
// dig; uninstall.sh puts the file back byte for byte.
func testVM(t *testing.T, e *env) {
	for _, tool := range []string{"ip", "getent", "dig", "bash"} {
		testenv.RequireTool(t, tool)
	}
	sweepVMs(t)
	ns := fmt.Sprintf("mdvm-%d", os.Getpid())
	hostLink := fmt.Sprintf("mdvmh%d", os.Getpid()%100000)
	mustRun(t, "ip", "netns", "add", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", ns).Run() })
	mustRun(t, "ip", "link", "add", hostLink, "type", "veth", "peer", "name", "eth0", "netns", ns)
	t.Cleanup(func() { _ = exec.Command("ip", "link", "del", hostLink).Run() })
	mustRun(t, "ip", "addr", "add", vmHostAddr+"/30", "dev", hostLink)
	mustRun(t, "ip", "link", "set", hostLink, "up")
	for _, c := range [][]string{
		{"ip", "link", "set", "lo", "up"},
		{"ip", "addr", "add", vmAddr + "/30", "dev", "eth0"},
		{"ip", "link", "set", "eth0", "up"},
		{"ip", "route", "add", "default", "via", vmHostAddr},
	} {
		mustRun(t, append([]string{"ip", "netns", "exec", ns}, c...)...)
	}

	// The node host's resolv.conf, as the kubelet reads it.
	orig, err := os.ReadFile(filepath.Join(e.n.Dir, "resolv.conf"))
	if err != nil {
		t.Fatal(err)
	}
	etc := filepath.Join("/etc/netns", ns)
	if err := os.MkdirAll(etc, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(etc) })
	resolv := filepath.Join(etc, "resolv.conf")
	if err := os.WriteFile(resolv, orig, 0o644); err != nil {
		t.Fatal(err)
	}

	state := t.TempDir()
	scripts, err := filepath.Abs("../../examples/vm")
	if err != nil {
		t.Fatal(err)
	}
	script := func(name string) {
		t.Helper()
		cmd := exec.Command("ip", "netns", "exec", ns, "bash", filepath.Join(scripts, name), "--no-systemd")
		cmd.Env = append(os.Environ(), "STATE_DIR="+state)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", name, err, out)
		}
	}
	script("setup.sh")
	if got := string(readFile(t, resolv)); !strings.Contains(got, "nameserver 127.0.0.1\n") || !strings.Contains(got, "search corp.example.com\n") ||
		strings.Contains(got, nodetest.NodeIP.String()) {
		t.Errorf("resolv.conf after setup.sh:\n%s", got)
	}

	// --no-systemd: the test starts what the unit would.
	args := append([]string{"netns", "exec", ns, e.meshdns}, vmUnitArgs(t, state)...)
	args = append(args, "--control-plane", e.vmGRPCAddr, "--namespace", "demo", "--pod-name", "node1-host",
		"--ca-cert", e.vm.ca, "--tls-cert", e.vm.clientCert, "--tls-key", e.vm.clientKey)
	agent, err := kubetest.StartProcess("vm-agent", "ip", filepath.Join(e.dir, "vm-agent.log"), args)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("VM agent log:\n%s", agent.Tail(4000))
		}
		agent.Stop(5 * time.Second)
	})

	web := e.webService(t)
	in := func(name string, a ...string) (string, error) {
		out, err := exec.Command("ip", append([]string{"netns", "exec", ns, name}, a...)...).CombinedOutput()
		return strings.TrimSpace(string(out)), err
	}
	testenv.Eventually(t, "the VM's agent answering from its table", 30*time.Second, func() bool {
		if agent.Exited() {
			t.Fatalf("the VM agent exited:\n%s", agent.Tail(4000))
		}
		out, _ := in("dig", "@127.0.0.1", "+time=1", "+tries=1", "+short", "web.demo.svc.cluster.local.")
		return out == web.Spec.ClusterIP
	})
	want := map[string]string{
		"web.demo.svc.cluster.local": web.Spec.ClusterIP,
		"web.demo":                   web.Spec.ClusterIP,
		"www.example.org":            externalIP, // forwarded to the saved resolver
		"web.corp.example.com":       corpWebIP,  // the node's own domain, not hijacked
	}
	for name, w := range want {
		out, err := in("getent", "hosts", name)
		if f := strings.Fields(out); err != nil || len(f) == 0 || f[0] != w {
			t.Errorf("getent hosts %s on the node host: %q (%v), want %s", name, out, err, w)
		}
	}
	if out, _ := in("dig", "+short", "SRV", "_http._tcp.web.demo.svc.cluster.local."); !strings.HasSuffix(out, " 80 web.demo.svc.cluster.local.") {
		t.Errorf("SRV on the node host: %q", out)
	}
	t.Logf("the node host resolved %d names through its agent", len(want)+1)

	agent.Stop(5 * time.Second)
	script("uninstall.sh")
	if diff := cmp.Diff(string(orig), string(readFile(t, resolv))); diff != "" {
		t.Errorf("resolv.conf after uninstall.sh (-want +got):\n%s", diff)
	}
}

// vmUnitArgs returns the agent arguments of examples/vm/meshdns-agent.service
// with /var/lib/meshdns moved to state.
func vmUnitArgs(t *testing.T, state string) []string {
	t.Helper()
	f, err := os.Open("../../examples/vm/meshdns-agent.service")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if cmd, ok := strings.CutPrefix(sc.Text(), "ExecStart="); ok {
			fields := strings.Fields(strings.ReplaceAll(cmd, "/var/lib/meshdns", state))
			if len(fields) < 2 || fields[1] != "agent" {
				t.Fatalf("ExecStart %q does not run meshdns agent", cmd)
			}
			return fields[1:]
		}
	}
	t.Fatal("no ExecStart in meshdns-agent.service")
	return nil
}

func mustRun(t *testing.T, argv ...string) {
	t.Helper()
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// sweepVMs removes what a killed run of testVM left: only TestNode makes
// mdvm-* namespaces, and it holds the machine's node lock, so any found now
// is stale. Deleting a namespace deletes its end of the veth, and with it
// the host's end.
func sweepVMs(t *testing.T) {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "mdvm-") {
			_ = exec.Command("ip", "netns", "del", f[0]).Run()
			t.Logf("removed the namespace %s of an earlier run", f[0])
		}
	}
	stale, _ := filepath.Glob("/etc/netns/mdvm-*")
	for _, d := range stale {
		os.RemoveAll(d)
	}
}

// webService returns the Service demo/web that InjectedPod creates, making
// it when a part runs alone (go test -run).
func (e *env) webService(t *testing.T) *corev1.Service {
	t.Helper()
	svcs := e.c.Client.CoreV1().Services("demo")
	web, err := svcs.Get(t.Context(), "web", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		web, err = svcs.Create(t.Context(), &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: "web"},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
		}, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
	return web
}
