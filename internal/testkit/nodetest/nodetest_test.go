package nodetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestNode starts a node and runs a pod with an init container on it: the
// pod gets an address on the pod network and the cluster DNS settings, and
// its logs come back through the API server.
func TestNode(t *testing.T) {
	c := kubetest.Start(t)
	n := Start(t, c, Options{Search: []string{"corp.example.com"}})
	ns := c.Namespace(t, "node")
	runProbe(t, c, n, ns)
}

var busybox = Image{Name: "busybox", Files: map[string]string{"/bin/busybox": "/bin/busybox"},
	Links: map[string]string{"/bin/sh": "busybox", "/bin/cat": "busybox", "/bin/sleep": "busybox", "/bin/echo": "busybox"}}

// runProbe runs the probe pod and checks what it saw.
func runProbe(t *testing.T, c *kubetest.Cluster, n *Node, ns string) {
	if err := n.LoadImage(busybox); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	container := func(name, script string) corev1.Container {
		return corev1.Container{Name: name, Image: busybox.Ref(), ImagePullPolicy: corev1.PullNever,
			Command: []string{"/bin/sh", "-c", script}}
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "probe"},
		Spec: corev1.PodSpec{
			NodeName:                      n.Name,
			AutomountServiceAccountToken:  new(bool),
			TerminationGracePeriodSeconds: new(int64),
			InitContainers:                []corev1.Container{container("init", "echo init ran")},
			Containers:                    []corev1.Container{container("main", "cat /etc/resolv.conf; echo done; sleep 3600")},
		},
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var logs string
	testenv.Eventually(t, "the pod running and logging", time.Minute, func() bool {
		logs = n.ContainerLog(ns, "probe", "main")
		return strings.Contains(logs, "done")
	})
	// The same log through the API server, which reaches the kubelet at
	// the node address (once the kubelet has reported the container).
	testenv.Eventually(t, "the log through the API server", 30*time.Second, func() bool {
		b, err := c.Client.CoreV1().Pods(ns).GetLogs("probe", &corev1.PodLogOptions{Container: "main"}).DoRaw(ctx)
		return err == nil && strings.Contains(string(b), "done")
	})
	p, err := c.Client.CoreV1().Pods(ns).Get(ctx, "probe", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ip, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil || !netip.MustParsePrefix(podSubnet).Contains(ip) {
		t.Errorf("pod IP %q, want one in %s", p.Status.PodIP, podSubnet)
	}
	for _, want := range []string{"nameserver " + NodeIP.String(), "search " + ns + ".svc.cluster.local svc.cluster.local cluster.local corp.example.com"} {
		if !strings.Contains(logs, want) {
			t.Errorf("pod resolv.conf lacks %q:\n%s", want, logs)
		}
	}
	if n.StartupTime <= 0 {
		t.Errorf("StartupTime %v", n.StartupTime)
	}
}

// TestSweepAfterKill kills a test binary that runs a node with a pod, as a
// CI timeout would, and checks that the next Start removes what it left:
// the container shims and processes, the node folder and its mounts.
func TestSweepAfterKill(t *testing.T) {
	if os.Getenv("NODETEST_CHILD") != "" {
		c := kubetest.Start(t)
		n := Start(t, c, Options{})
		runProbe(t, c, n, c.Namespace(t, "child"))
		fmt.Println("NODE_DIR=" + n.Dir)
		time.Sleep(time.Hour)
		return
	}
	testenv.RequireRoot(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestSweepAfterKill$", "-test.v")
	cmd.Env = append(os.Environ(), "NODETEST_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	dir := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "NODE_DIR="); ok {
				dir <- d
			}
		}
		close(dir)
	}()
	var old string
	select {
	case old = <-dir:
	case <-time.After(3 * time.Minute):
	}
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
	if old == "" {
		t.Fatal("the child never ran its node")
	}
	if shims := shimsOf(old); len(shims) == 0 {
		t.Fatalf("no shim of %s survived the kill: the test proves nothing", old)
	}
	c := kubetest.Start(t)
	Start(t, c, Options{})
	if shims := shimsOf(old); len(shims) > 0 {
		t.Errorf("shims of the killed node still run: %v", shims)
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("folder of the killed node: %v", err)
	}
	if b, _ := os.ReadFile("/proc/self/mounts"); strings.Contains(string(b), old) {
		t.Errorf("mounts of the killed node remain")
	}
}

// shimsOf lists the PIDs of containerd shims serving the node in dir.
func shimsOf(dir string) []string {
	var pids []string
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), "containerd-shim") && strings.Contains(string(b), dir+"/") {
			pids = append(pids, filepath.Base(filepath.Dir(p)))
		}
	}
	return pids
}
