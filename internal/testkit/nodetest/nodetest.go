// Package nodetest runs a real Kubernetes node on this machine for
// end-to-end tests: containerd, runc and bridge CNI from Debian, and a
// kubelet (built by hack/get-kube.sh into $KUBE_ASSETS) registered with a
// kubetest cluster. Pods are created through the API server, started by the
// kubelet in their own network namespaces, and reach the host only: the
// node's addresses never leave the machine.
//
//	c := kubetest.Start(t)
//	n := nodetest.Start(t, c)          // stopped by t.Cleanup
//	n.LoadImage(nodetest.Image{...})   // images built here, no registry
//	pod.Spec.NodeName = n.Name         // no scheduler runs
//
// One node per machine at a time: the kubelet's cgroups (/kubepods), its
// log folder and the bridge names are machine-wide, so Start takes a lock.
package nodetest

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// Fixed names and addresses of the node. The node address sits on a
// bridge with no ports (this kernel has no dummy links): the kubelet
// refuses loopback, and pods reach it through their gateway.
const (
	NodeName   = "node1"
	nodeLink   = "mdnode0"
	podBridge  = "mdcni0"
	podSubnet  = "10.244.0.0/24"
	lockPath   = "/run/meshdns-nodetest.lock"
	stateFile  = "nodetest.state"
	pauseImage = "pause"
	// CNIConfName is the node's network configuration list in CNIConfDir.
	CNIConfName = "10-bridge.conflist"
)

// cniPlugins are the plugins of the node's network, from Debian's
// containernetworking-plugins.
var cniPlugins = []string{"bridge", "host-local", "loopback"}

// NodeIP is the node's address, where tests put what pods must reach on
// the host (a DNS stand-in, the control plane).
var NodeIP = netip.MustParseAddr("10.250.0.1")

// Node is a running kubelet and container runtime.
type Node struct {
	Name string
	// Dir holds the node's state, configs and logs (containerd.log,
	// kubelet.log); removed by Stop.
	Dir string
	// CNIBinDir and CNIConfDir are the container runtime's CNI bin and
	// configuration directories (under Dir): a test installs a chained
	// plugin there as a CNI DaemonSet would on a node.
	CNIBinDir, CNIConfDir string
	// ManifestDir is the kubelet's static pod directory (staticPodPath):
	// a pod written there runs with no API server, as a control plane's
	// own pods do.
	ManifestDir string
	// StartupTime is how long Start took, from the first command to the
	// node being Ready with its images loaded.
	StartupTime time.Duration

	cluster    *kubetest.Cluster
	containerd *kubetest.Process
	kubelet    *kubetest.Process
	lock       *os.File
	saved      sysctls
	stopped    bool
}

// Options change the node.
type Options struct {
	// Search is the node's DNS search list, which the kubelet appends to
	// the cluster's for ClusterFirst pods (like a corporate domain).
	Search []string
}

// Start runs a node registered with c for the test and stops it in
// t.Cleanup. It skips (outside CI) or fails (in CI) when it is not root or
// a binary is missing.
func Start(t testing.TB, c *kubetest.Cluster, o Options) *Node {
	t.Helper()
	testenv.RequireRoot(t)
	for _, tool := range []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "ip", "iptables"} {
		testenv.RequireTool(t, tool)
	}
	for _, f := range []string{"/usr/lib/cni/bridge", "/usr/lib/cni/host-local", "/usr/lib/cni/loopback", "/bin/busybox"} {
		if _, err := os.Stat(f); err != nil {
			testenv.Unavailable(t, "nodetest needs %s (apt-get install containernetworking-plugins busybox-static)", f)
		}
	}
	kubelet := filepath.Join(testenv.KubeAssets(t), "kubelet")
	if _, err := os.Stat(kubelet); err != nil {
		testenv.Unavailable(t, "nodetest needs %s (hack/get-kube.sh builds it)", kubelet)
	}
	n, err := start(c, kubelet, o)
	if err != nil {
		if n != nil {
			err = fmt.Errorf("%w\n%s", err, n.Logs())
			n.Stop()
		}
		t.Fatalf("nodetest: %v", err)
	}
	t.Cleanup(n.Stop)
	// Runs before Stop (cleanups run last first): what the node saw.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("nodetest: pods and logs of the failed test:\n%s\n%s", n.describePods(), n.Logs())
		}
	})
	t.Logf("nodetest: node Ready in %v", n.StartupTime.Round(time.Millisecond))
	return n
}

func start(c *kubetest.Cluster, kubelet string, o Options) (*Node, error) {
	lock, err := takeLock()
	if err != nil {
		return nil, err
	}
	// From here: the wait for another test's node is not start-up time.
	t0 := time.Now()
	// Holding the lock, anything left by an earlier node is from a run
	// that died before its Stop.
	sweep()
	dir, err := os.MkdirTemp("/var/tmp", "nodetest-")
	if err != nil {
		lock.Close()
		return nil, err
	}
	n := &Node{Name: NodeName, Dir: dir, CNIBinDir: filepath.Join(dir, "cni/bin"), CNIConfDir: filepath.Join(dir, "cni/net.d"),
		ManifestDir: filepath.Join(dir, "manifests"), cluster: c, lock: lock, saved: readSysctls()}
	if err := os.WriteFile(filepath.Join(lockDir(), stateFile), []byte(dir+"\n"+n.saved.String()), 0o600); err != nil {
		return n, err
	}
	if err := n.network(); err != nil {
		return n, err
	}
	if err := n.writeConfigs(o); err != nil {
		return n, err
	}
	if n.containerd, err = kubetest.StartProcess("containerd", "containerd",
		filepath.Join(dir, "containerd.log"), []string{"--config", filepath.Join(dir, "containerd.toml")}); err != nil {
		return n, err
	}
	if err := waitFor(10*time.Second, "containerd socket", func() bool { _, err := os.Stat(n.socket()); return err == nil }); err != nil {
		return n, err
	}
	pause := Image{Name: pauseImage, Files: map[string]string{"/bin/busybox": "/bin/busybox"},
		Entrypoint: []string{"/bin/busybox", "sleep", "2147483647"}}
	if err := n.LoadImage(pause); err != nil {
		return n, err
	}
	if n.kubelet, err = kubetest.StartProcess("kubelet", kubelet, filepath.Join(dir, "kubelet.log"), []string{
		"--config=" + filepath.Join(dir, "kubelet.yaml"),
		"--kubeconfig=" + c.Kubeconfig,
		"--root-dir=" + filepath.Join(dir, "kubelet"),
		"--hostname-override=" + NodeName,
		"--node-ip=" + NodeIP.String(),
		"--v=2",
	}); err != nil {
		return n, err
	}
	if err := n.waitReady(2 * time.Minute); err != nil {
		return n, err
	}
	n.StartupTime = time.Since(t0)
	return n, nil
}

// waitReady waits for the node's Ready condition, then removes the
// not-ready taint the node lifecycle controller (not running here) would.
func (n *Node) waitReady(within time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cs := n.cluster.Client
	for {
		if n.kubelet.Exited() {
			return errors.New("kubelet exited")
		}
		node, err := cs.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err == nil && ready(node) {
			var taints []corev1.Taint
			for _, t := range node.Spec.Taints {
				if t.Key != "node.kubernetes.io/not-ready" {
					taints = append(taints, t)
				}
			}
			node.Spec.Taints = taints
			_, err = cs.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{})
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node not Ready after %v (last error: %v)", within, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func ready(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Stop deletes the node's pods, stops the kubelet and containerd, and
// removes every mount, network device, cgroup and file the node made. Safe
// to call more than once.
func (n *Node) Stop() {
	if n == nil || n.stopped {
		return
	}
	n.stopped = true
	if n.kubelet != nil && !n.kubelet.Exited() {
		n.drain(30 * time.Second)
	}
	n.kubelet.Stop(10 * time.Second)
	killCgroups()
	killShims(n.Dir)
	n.containerd.Stop(10 * time.Second)
	cleanup(n.Dir, n.saved)
	_ = os.Remove(filepath.Join(lockDir(), stateFile))
	if n.lock != nil {
		n.lock.Close() // releases the flock
	}
}

// drain deletes every pod bound to the node so the kubelet tears down
// their sandboxes (CNI DEL, mounts) while it still runs.
func (n *Node) drain(within time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cs := n.cluster.Client
	sel := metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name}
	pods, err := cs.CoreV1().Pods("").List(ctx, sel)
	if err != nil {
		return
	}
	zero := int64(0)
	for _, p := range pods.Items {
		_ = cs.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
	_ = waitFor(within, "pods gone", func() bool {
		pods, err := cs.CoreV1().Pods("").List(ctx, sel)
		return err == nil && len(pods.Items) == 0
	})
}

// describePods lists the node's pods with their phase and container states.
func (n *Node) describePods() string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	pods, err := n.cluster.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s/%s %s %s\n", p.Namespace, p.Name, p.Status.Phase, p.Status.Message)
		for _, cs := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
			fmt.Fprintf(&b, "  %s ready=%v restarts=%d state=%+v last=%+v\n", cs.Name, cs.Ready, cs.RestartCount, cs.State, cs.LastTerminationState)
		}
	}
	return b.String()
}

// ContainerLog returns what a container of a pod on the node wrote so far,
// read from the kubelet's log files (all restarts, oldest first), with the
// CRI prefix (time, stream, tag) of each line removed.
func (n *Node) ContainerLog(namespace, pod, container string) string {
	files, _ := filepath.Glob(filepath.Join(n.Dir, "pod-logs", namespace+"_"+pod+"_*", container, "*.log"))
	sort.Strings(files)
	var b strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.SplitN(line, " ", 4); len(f) == 4 {
				b.WriteString(f[3])
				b.WriteByte('\n')
			}
		}
	}
	return b.String()
}

// Logs returns the end of the kubelet and containerd logs.
func (n *Node) Logs() string {
	var b strings.Builder
	for _, p := range []*kubetest.Process{n.kubelet, n.containerd} {
		if p != nil {
			b.WriteString(p.Tail(6000))
		}
	}
	return b.String()
}

func (n *Node) socket() string { return filepath.Join(n.Dir, "containerd.sock") }

func lockDir() string { return filepath.Dir(lockPath) }

// takeLock waits for the machine-wide node lock.
func takeLock() (*os.File, error) {
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func waitFor(within time.Duration, what string, cond func() bool) error {
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// Ctr runs ctr against the node's containerd in the kubelet's namespace.
func (n *Node) Ctr(args ...string) ([]byte, error) {
	return exec.Command("ctr", append([]string{"--address", n.socket(), "-n", "k8s.io"}, args...)...).CombinedOutput()
}

// KillContainer SIGKILLs a container's process, given the ID of a pod
// container status ("containerd://<id>" or the bare ID), as an OOM kill or
// crash would; the kubelet then restarts it.
func (n *Node) KillContainer(id string) error {
	id = strings.TrimPrefix(id, "containerd://")
	if out, err := n.Ctr("tasks", "kill", "-s", "SIGKILL", id); err != nil {
		return fmt.Errorf("kill container %s: %v: %s", id, err, out)
	}
	return nil
}

// MemoryUsage reads a container's memory.usage_in_bytes as the kubelet's
// cgroup (v1 memory hierarchy) sees it.
func (n *Node) MemoryUsage(id string) (int64, error) {
	b, err := readContainerCgroup(id, "memory.usage_in_bytes")
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// ContainerPIDs lists the host PIDs of a container's processes (its memory
// cgroup's cgroup.procs), for a test that signals one process of a
// container rather than the container's first one.
func (n *Node) ContainerPIDs(id string) ([]int, error) {
	b, err := readContainerCgroup(id, "cgroup.procs")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("container %s: cgroup.procs: %w", id, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// readContainerCgroup reads a file of a container's memory cgroup, given
// the ID of a pod container status.
func readContainerCgroup(id, file string) ([]byte, error) {
	id = strings.TrimPrefix(id, "containerd://")
	for _, pattern := range []string{"/sys/fs/cgroup/memory/kubepods/pod*/" + id, "/sys/fs/cgroup/memory/kubepods/*/pod*/" + id} {
		dirs, _ := filepath.Glob(pattern)
		if len(dirs) == 1 {
			return os.ReadFile(filepath.Join(dirs[0], file))
		}
	}
	return nil, fmt.Errorf("no memory cgroup for container %s", id)
}
