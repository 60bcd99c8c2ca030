package node

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/cni"
	"github.com/meshdns/meshdns/internal/testkit/kustomizetest"
	"github.com/meshdns/meshdns/internal/testkit/nodetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestCNIFailSafe: nothing the CNI mode installs stops the node from
// starting pods it has no business in. The plugin is installed by the
// DaemonSet's pod from the rendered examples/overlays/cni, then:
//   - InstallerPodDeleted: the installer's pod deleted (its projected token
//     dies with it); pods in kube-system and in a namespace without
//     injection start;
//   - APIServerDown: the API server stopped (SIGSTOP: it accepts
//     connections and never answers); a kube-system static pod starts, a
//     static pod in another namespace fails its sandbox within the plugin's
//     bounded lookup, with an error saying why, and starts once the API
//     server is back;
//   - Uninstall: the DaemonSet deleted (its pod's preStop hook removes the
//     plugin); the configuration list is as before install, byte for byte,
//     and pods start.
func TestCNIFailSafe(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	e.createNamespace(t, ctx, "plain", nil)
	conf := filepath.Join(e.n.CNIConfDir, nodetest.CNIConfName)
	before, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	ds := installCNI(t, ctx, e, kustomizetest.Render(t, "../../examples", "overlays/cni", nil))
	installer := ds.Name + "-" + nodetest.NodeName

	t.Run("InstallerPodDeleted", func(t *testing.T) {
		deletePod(t, ctx, e, ds.Namespace, installer)
		started, attempted := startPods(t, ctx, e, "after-delete", map[string]int{"kube-system": 3, "plain": 3})
		t.Logf("installer pod deleted: %d of %d pods started (kube-system and plain)", started, attempted)
		if started != attempted {
			t.Errorf("%d of %d pods started after the installer pod was deleted", started, attempted)
		}
		if b, _ := os.ReadFile(conf); !strings.Contains(string(b), cni.PluginType) {
			t.Errorf("the plugin was removed with its DaemonSet still there (a restart): injected pods would start without their redirect")
		}
		// The DaemonSet controller's replacement, for what follows.
		startInstallerPod(t, ctx, e, ds)
	})

	t.Run("APIServerDown", func(t *testing.T) { testAPIServerDown(t, e) })

	t.Run("Uninstall", func(t *testing.T) {
		// kubectl delete -f 60-cni.yaml: the DaemonSet goes at once, the
		// garbage collector (not running here) then deletes its pod.
		if err := e.c.Client.AppsV1().DaemonSets(ds.Namespace).Delete(ctx, ds.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		deletePod(t, ctx, e, ds.Namespace, installer)
		after, _ := os.ReadFile(conf)
		if string(after) != string(before) {
			t.Errorf("the configuration list after uninstall:\n%s\nwant, byte for byte, as before install:\n%s", after, before)
		}
		ents, _ := os.ReadDir(e.n.CNIConfDir)
		if len(ents) != 1 {
			t.Errorf("the configuration directory after uninstall holds %v, want the list alone", ents)
		}
		if _, err := os.Stat(filepath.Join(e.n.CNIBinDir, cni.PluginType)); !os.IsNotExist(err) {
			t.Errorf("the plugin binary after uninstall: %v", err)
		}
		started, attempted := startPods(t, ctx, e, "after-uninstall", map[string]int{"kube-system": 1, "plain": 1})
		t.Logf("after uninstall: %d of %d pods started", started, attempted)
		if started != attempted {
			t.Errorf("%d of %d pods started after uninstall", started, attempted)
		}
	})
}

// deletePod deletes a pod as kubectl does (its grace period, its preStop
// hook) and waits until the kubelet has stopped it.
func deletePod(t *testing.T, ctx context.Context, e *env, ns, name string) {
	t.Helper()
	if err := e.c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "pod "+ns+"/"+name+" gone", 2*time.Minute, func() bool {
		_, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

// startPods creates count pods per namespace and waits for them to run;
// it returns how many did of how many were created. The wait is for all
// of them, bounded: a sandbox the plugin fails is retried by the kubelet
// with a growing back-off, and never succeeds while the cause stays.
func startPods(t *testing.T, ctx context.Context, e *env, prefix string, count map[string]int) (started, attempted int) {
	t.Helper()
	var pods []*corev1.Pod
	for ns, k := range count {
		for i := range k {
			p := appPod(fmt.Sprintf("%s-%d", prefix, i), []string{"www.example.org"})
			p.Namespace = ns
			created, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pods = append(pods, created)
		}
	}
	running := func() int {
		k := 0
		for _, p := range pods {
			got, err := e.c.Client.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
			if err == nil && got.Status.Phase == corev1.PodRunning {
				k++
			}
		}
		return k
	}
	deadline := time.Now().Add(90 * time.Second)
	for running() < len(pods) && time.Now().Before(deadline) {
		time.Sleep(500 * time.Millisecond)
	}
	started = running()
	if started < len(pods) {
		t.Logf("pods not started:\n%s", sandboxErrors(e))
	}
	for _, p := range pods {
		zero := int64(0)
		_ = e.c.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	}
	return started, len(pods)
}

// sandboxErrors returns the runtime's log lines of failed sandboxes: the
// plugin's error, as the kubelet turns it into the pod's event.
func sandboxErrors(e *env) string {
	log, _ := os.ReadFile(filepath.Join(e.n.Dir, "containerd.log"))
	var out []string
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, "RunPodSandbox") && strings.Contains(line, "failed") {
			out = append(out, line)
		}
	}
	if len(out) > 4 {
		out = out[len(out)-4:]
	}
	return strings.Join(out, "\n")
}

// staticPod writes a pod into the kubelet's static pod directory: it runs
// with no API server, as a control plane's own pods do. The kubelet names
// it <name>-<node>.
func staticPod(t *testing.T, e *env, ns, name string) string {
	t.Helper()
	p := appPod(name, []string{"www.example.org"})
	p.APIVersion, p.Kind = "v1", "Pod"
	p.Namespace = ns
	p.Spec.NodeName = ""
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(e.n.ManifestDir, ns+"-"+name+".json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// Removed before the node stops: the kubelet then stops the pod.
	t.Cleanup(func() { _ = os.Remove(path) })
	return name + "-" + nodetest.NodeName
}

// testAPIServerDown stops the API server and starts static pods: the one
// in kube-system starts (the plugin decides it from CNI_ARGS), the one in
// a namespace the plugin must look up fails its sandbox within the
// plugin's lookup bound, with that reason in the runtime's log, and starts
// once the API server answers again.
func testAPIServerDown(t *testing.T, e *env) {
	pid := e.c.APIServerPID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)

	sys := staticPod(t, e, "kube-system", "static-sys")
	plain := staticPod(t, e, "plain", "static-plain")
	t0 := time.Now()
	// The kubelet itself is slow here: its own calls to the stopped API
	// server (mirror pods, status) wait for their timeouts.
	testenv.Eventually(t, "the kube-system static pod running with the API server stopped", 4*time.Minute, func() bool {
		return strings.Contains(e.n.ContainerLog("kube-system", sys, "app"), "RESULT ")
	})
	t.Logf("kube-system static pod running %v after it was written, the API server stopped", time.Since(t0).Round(100*time.Millisecond))
	want := "plain/" + plain + ": the API server did not answer within " + cni.DefaultLookupTimeout.String()
	testenv.Eventually(t, "the plain static pod's sandbox failed by the bounded lookup", 4*time.Minute, func() bool {
		log, _ := os.ReadFile(filepath.Join(e.n.Dir, "containerd.log"))
		return strings.Contains(string(log), want)
	})
	t.Logf("plain static pod: sandbox failed %v after it was written: %q", time.Since(t0).Round(100*time.Millisecond), want)
	if out := e.n.ContainerLog("plain", plain, "app"); out != "" {
		t.Errorf("the plain static pod ran with the API server stopped (fail closed): %s", out)
	}

	resume()
	t1 := time.Now()
	testenv.Eventually(t, "the plain static pod running once the API server answers", 3*time.Minute, func() bool {
		return strings.Contains(e.n.ContainerLog("plain", plain, "app"), "RESULT ")
	})
	t.Logf("plain static pod running %v after the API server was resumed", time.Since(t1).Round(100*time.Millisecond))
}
