package node

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshdns/meshdns/controlplane/webhook"
	"github.com/meshdns/meshdns/internal/testkit/nodetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestStatusFleet: `meshdns status --kubeconfig` on a real node with two
// control plane replicas running as pods. The replicas are found through
// the API server by the Deployment's labels and read through the API
// server's port-forward to each pod's loopback admin port (the kubelet's
// streaming server and containerd do the forwarding, as for kubectl); the
// agents of both are merged, and the injected pods no replica has are
// listed with the reason the pod's status gives.
//
// The replicas run with host networking (no kube-proxy here, and the API
// server is on the machine's loopback), each on its own ports; a Service
// address is played by two DNAT rules on the node that send new
// connections to the "Service" port to each replica in turn, as
// kube-proxy's rules would, so agents spread over both.
func TestStatusFleet(t *testing.T) {
	e := setup(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs := e.c.Client
	e.createNamespace(t, ctx, "demo", map[string]string{"meshdns.io/inject": "enabled", "pod-security.kubernetes.io/enforce": "privileged"})
	// Host networking and the kubeconfig's host path need the privileged
	// level in the control plane's namespace (the manifests say restricted,
	// where the real Deployment runs without either).
	ns, err := cs.CoreV1().Namespaces().Get(ctx, "meshdns-system", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Labels["pod-security.kubernetes.io/enforce"] = "privileged"
	if _, err := cs.CoreV1().Namespaces().Update(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	kubeconfig := filepath.Join(e.dir, "controlplane.kubeconfig") // setup's, the ServiceAccount's RBAC
	var grpcAddrs []string
	for _, name := range []string{"meshdns-controlplane-a", "meshdns-controlplane-b"} {
		grpcAddrs = append(grpcAddrs, startReplicaPod(t, ctx, e, name, kubeconfig))
	}
	service := serviceDNAT(t, grpcAddrs)
	setTemplate(t, ctx, e, templateText(service))

	// Four injected pods whose agents spread over the replicas; one that
	// is never scheduled; one whose agent dials where nothing listens.
	apps := []string{"app-1", "app-2", "app-3", "app-4"}
	for _, name := range apps {
		if _, err := cs.CoreV1().Pods("demo").Create(ctx, appPod(name, []string{"web.demo"}), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pending := appPod("unscheduled", []string{"web.demo"})
	pending.Spec.NodeName = ""
	if _, err := cs.CoreV1().Pods("demo").Create(ctx, pending, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	lost := lostAgentPod(t, ctx, e, "lost")
	// One whose agent dies at every start: its supervisor forwards the
	// pod's queries in safe mode, and reports ready.
	crashy := crashingAgentPod(t, ctx, e, "crashy")
	testenv.Eventually(t, "the apps' agents ready (and the crashing one's supervisor) and the lost pod's agent running unready", 3*time.Minute, func() bool {
		for _, name := range append(slices.Clone(apps), lost, crashy) {
			p, err := cs.CoreV1().Pods("demo").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false
			}
			st := agentStatus(p)
			if st == nil || st.State.Running == nil || st.Ready != (name != lost) {
				return false
			}
		}
		return true
	})

	status := func(args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, e.meshdns, append([]string{"status", "--kubeconfig", e.c.Kubeconfig, "--timeout", "2m"}, args...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			err = fmt.Errorf("%v: %s", err, stderr.String())
		}
		return out, err
	}
	var got struct {
		Replicas []struct {
			Pod, Phase, Error string
			Agents            int
		}
		Agents []struct {
			Namespace, Pod, Replica, Acked, View string
		}
		Unsynced []struct{ Namespace, Pod, Reason, SafeMode string }
	}
	// The crashing pod's supervisor hands its probe port to each new try
	// of the agent for a moment: read until status caught it in safe mode.
	testenv.Eventually(t, "status showing the crashing pod in safe mode", 2*time.Minute, func() bool {
		out, err := status("--output", "json")
		if err != nil {
			t.Fatalf("meshdns status --kubeconfig: %v\n%s", err, out)
		}
		got.Replicas, got.Agents, got.Unsynced = nil, nil, nil
		if err := json.Unmarshal(out, &got); err != nil {
			t.Fatalf("status --output json: %v\n%s", err, out)
		}
		for _, u := range got.Unsynced {
			if u.Pod == crashy && u.SafeMode != "" {
				return true
			}
		}
		t.Logf("not yet in safe mode: %+v", got.Unsynced)
		return false
	})
	if len(got.Replicas) != 2 {
		t.Fatalf("replicas %+v, want the two control plane pods", got.Replicas)
	}
	for _, r := range got.Replicas {
		if r.Error != "" || r.Phase != "Running" || r.Agents < 1 {
			t.Errorf("replica %+v: want Running, read through its port-forward, with an agent of its own", r)
		}
	}
	var connected []string
	for _, a := range got.Agents {
		connected = append(connected, a.Namespace+"/"+a.Pod)
		if a.Acked == "" || a.Acked != a.View {
			t.Errorf("agent %s/%s on %s: acked %q, view %q: want in sync", a.Namespace, a.Pod, a.Replica, a.Acked, a.View)
		}
	}
	slices.Sort(connected)
	if want := []string{"demo/app-1", "demo/app-2", "demo/app-3", "demo/app-4"}; !slices.Equal(connected, want) {
		t.Errorf("agents of both replicas merged: %v, want %v", connected, want)
	}
	reasons := map[string]string{}
	for _, u := range got.Unsynced {
		reasons[u.Namespace+"/"+u.Pod] = u.Reason
	}
	if len(reasons) != 3 || !strings.Contains(reasons["demo/unscheduled"], "not scheduled") ||
		!strings.Contains(reasons["demo/"+lost], "not ready") ||
		!strings.Contains(reasons["demo/"+crashy], "agent in safe mode: the agent crashed ") {
		t.Errorf("injected pods not connected: %v, want demo/unscheduled (not scheduled), demo/%s (agent not ready) and demo/%s (safe mode, read from its probe port through the API server)",
			reasons, lost, crashy)
	}
	table, err := status()
	if err != nil {
		t.Errorf("meshdns status --kubeconfig (table): %v", err)
	}
	t.Logf("meshdns status --kubeconfig:\n%s", table)

	// A replica that runs but cannot be read (here: nothing listens on its
	// admin port, which the kubelet reports on the port-forward's error
	// stream): shown with the error, the unconnected pods marked as maybe
	// on it, exit 1.
	broken := appPod("meshdns-controlplane-c", []string{"web.demo"})
	broken.Namespace = "meshdns-system"
	broken.Labels = map[string]string{"app.kubernetes.io/name": "meshdns-controlplane"}
	broken.Annotations = map[string]string{"meshdns.io/inject": "false"}
	if _, err := cs.CoreV1().Pods("meshdns-system").Create(ctx, broken, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the unreadable replica running", 2*time.Minute, func() bool {
		p, err := cs.CoreV1().Pods("meshdns-system").Get(ctx, broken.Name, metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning
	})
	out, err := status()
	t.Logf("meshdns status --kubeconfig with an unreadable replica (%v):\n%s", err, out)
	if err == nil || !strings.Contains(err.Error(), "could not read the agents of 1 of 3 replicas") {
		t.Errorf("status with an unreadable replica: err %v, want exit 1 naming it", err)
	}
	if !strings.Contains(string(out), "meshdns-controlplane-c") || !strings.Contains(string(out), "15014") ||
		!strings.Contains(string(out), "which could not be read") {
		t.Errorf("status with an unreadable replica: want its error (port 15014) and the unconnected pods marked:\n%s", out)
	}
}

// startReplicaPod runs a control plane replica as a pod on the node, with
// the Deployment's labels, host networking and free ports of its own, the
// setup's ServiceAccount kubeconfig and the shared webhook Secret (its CA
// is the one injected agents trust); it waits until the pod is ready and
// returns its gRPC address.
func startReplicaPod(t *testing.T, ctx context.Context, e *env, name, kubeconfig string) string {
	t.Helper()
	grpcAddr := freePort(t, nodetest.NodeIP.String())
	admin, hook, probe := freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1"), freePort(t, "127.0.0.1")
	_, probePort, _ := net.SplitHostPort(probe)
	root, zero := int64(0), int64(0)
	dirType := corev1.HostPathDirectory
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "meshdns-system",
			Labels:      map[string]string{"app.kubernetes.io/name": "meshdns-controlplane", "app.kubernetes.io/part-of": "meshdns"},
			Annotations: map[string]string{"meshdns.io/inject": "false"}},
		Spec: corev1.PodSpec{
			NodeName: nodetest.NodeName, HostNetwork: true, TerminationGracePeriodSeconds: &zero,
			AutomountServiceAccountToken: new(bool),
			Containers: []corev1.Container{{
				Name: "controlplane", Image: "localhost/meshdns:test", ImagePullPolicy: corev1.PullNever,
				Command: []string{"meshdns"},
				Args: []string{"controlplane", "--kubeconfig", kubeconfig, "--grpc-addr", grpcAddr, "--grpc-self-signed",
					"--admin-addr=" + admin, "--probe-addr", probe, "--webhook-addr", hook,
					"--webhook-secret", "meshdns-system/meshdns-webhook-certs", "--webhook-configs", "",
					"--webhook-dns-names", "127.0.0.1," + nodetest.NodeIP.String()},
				SecurityContext: &corev1.SecurityContext{RunAsUser: &root},
				ReadinessProbe: &corev1.Probe{PeriodSeconds: 1, ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Host: "127.0.0.1", Path: "/healthz/ready", Port: intstr.Parse(probePort)}}},
				VolumeMounts: []corev1.VolumeMount{{Name: "dir", MountPath: e.dir, ReadOnly: true}},
			}},
			Volumes: []corev1.Volume{{Name: "dir", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: e.dir, Type: &dirType}}}},
		},
	}
	if _, err := e.c.Client.CoreV1().Pods("meshdns-system").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log:\n%s", name, tail(e.n.ContainerLog("meshdns-system", name, "controlplane"), 4000))
		}
	})
	testenv.Eventually(t, name+" ready", 2*time.Minute, func() bool {
		p, err := e.c.Client.CoreV1().Pods("meshdns-system").Get(ctx, name, metav1.GetOptions{})
		return err == nil && podReady(p)
	})
	return grpcAddr
}

// serviceDNAT plays a Service on the node: new TCP connections from pods
// to a free port of the node address go to each backend in turn (nth
// statistic, as kube-proxy balances). The rules go with the test.
func serviceDNAT(t *testing.T, backends []string) string {
	t.Helper()
	service := freePort(t, nodetest.NodeIP.String())
	_, port, _ := net.SplitHostPort(service)
	var rules [][]string
	for i, b := range backends {
		rule := []string{"PREROUTING", "-d", nodetest.NodeIP.String() + "/32", "-p", "tcp", "--dport", port}
		if left := len(backends) - i; left > 1 {
			rule = append(rule, "-m", "statistic", "--mode", "nth", "--every", fmt.Sprint(left), "--packet", "0")
		}
		rule = append(rule, "-m", "comment", "--comment", "meshdns e2e/node service", "-j", "DNAT", "--to-destination", b)
		rules = append(rules, rule)
	}
	for _, r := range rules {
		if out, err := exec.Command("iptables", append([]string{"-w", "-t", "nat", "-A"}, r...)...).CombinedOutput(); err != nil {
			t.Fatalf("iptables -A %v: %v: %s", r, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("iptables", append([]string{"-w", "-t", "nat", "-D"}, r...)...).Run() })
	}
	return service
}

// setTemplate rewrites the template file the setup's control plane
// watches, and waits until its webhook injects by it (dry-run creations,
// which the webhook answers without side effects).
func setTemplate(t *testing.T, ctx context.Context, e *env, text string) {
	t.Helper()
	if err := os.WriteFile(e.template, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	want := strings.TrimSpace(strings.SplitN(strings.SplitN(text, "controlPlane: ", 2)[1], "\n", 2)[0])
	testenv.Eventually(t, "the webhook injecting by the new template", time.Minute, func() bool {
		p, err := e.c.Client.CoreV1().Pods("demo").Create(ctx, appPod("dry-run", nil), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			return false
		}
		for _, c := range p.Spec.InitContainers {
			if c.Name == webhook.AgentContainerName && slices.Contains(c.Args, want) {
				return true
			}
		}
		return false
	})
}

// lostAgentPod creates an injected pod whose agent dials a port where
// nothing listens, the control plane address changed.
func lostAgentPod(t *testing.T, ctx context.Context, e *env, name string) string {
	t.Helper()
	nowhere := freePort(t, nodetest.NodeIP.String())
	return editedAgentPod(t, ctx, e, name, "no --control-plane in the injected agent", func(c *corev1.Container) bool {
		for j := range c.Args {
			if j > 0 && c.Args[j-1] == "--control-plane" {
				c.Args[j] = nowhere
				return true
			}
		}
		return false
	})
}

// crashingAgentPod creates an injected pod with its agent's admin address
// on its probe port: the agent dies at every start (the second listener
// on the port fails) while its supervisor, which listens on the probe
// port only in safe mode, stays up. After three quick crashes the
// supervisor forwards the pod's queries in safe mode.
func crashingAgentPod(t *testing.T, ctx context.Context, e *env, name string) string {
	t.Helper()
	return editedAgentPod(t, ctx, e, name, "no agent with a readiness probe port in the injection", func(c *corev1.Container) bool {
		if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil {
			return false
		}
		port := c.ReadinessProbe.HTTPGet.Port.IntValue()
		c.Args = append(c.Args, "--admin-addr", fmt.Sprintf("127.0.0.1:%d", port))
		return port > 0
	})
}

// editedAgentPod creates the webhook's own injection of an app pod (a dry
// run) with its agent container changed by edit, which reports whether it
// changed it (else the test fails with missing), and the label that keeps
// the webhook out.
func editedAgentPod(t *testing.T, ctx context.Context, e *env, name, missing string, edit func(*corev1.Container) bool) string {
	t.Helper()
	p, err := e.c.Client.CoreV1().Pods("demo").Create(ctx, appPod(name, []string{"web.demo"}), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		t.Fatal(err)
	}
	changed := false
	for i := range p.Spec.InitContainers {
		if c := &p.Spec.InitContainers[i]; c.Name == webhook.AgentContainerName && edit(c) {
			changed = true
		}
	}
	if !changed {
		t.Fatalf("%s: %+v", missing, p.Spec.InitContainers)
	}
	p.ResourceVersion, p.UID, p.CreationTimestamp = "", "", metav1.Time{}
	if p.Labels == nil {
		p.Labels = map[string]string{}
	}
	p.Labels["meshdns.io/inject"] = "false"
	if _, err := e.c.Client.CoreV1().Pods("demo").Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return name
}

func agentStatus(p *corev1.Pod) *corev1.ContainerStatus {
	for i, s := range p.Status.InitContainerStatuses {
		if s.Name == webhook.AgentContainerName {
			return &p.Status.InitContainerStatuses[i]
		}
	}
	return nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
