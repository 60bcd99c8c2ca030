package node

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/meshdns/meshdns/controlplane/webhook"
	"github.com/meshdns/meshdns/internal/archtest"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/nodetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// env is one real node with the meshdns control plane running against its
// API server as in production: the example manifests' RBAC, the example
// webhook configuration, the injection template pointing at the image
// built from this repository.
type env struct {
	c        *kubetest.Cluster
	n        *nodetest.Node
	standIn  *dnsStandIn
	dir      string
	template string // the injection template file the control plane watches
	grpcAddr string // the control plane's gRPC address, on the node (TLS)
	// adminAddr is the control plane's admin port, on loopback.
	adminAddr string
	// vmGRPCAddr is the VM control plane's gRPC address (mTLS), vm the
	// VM's credentials for it.
	vmGRPCAddr string
	vm         vmCredentials
	meshdns    string // the static binary in the images
	webhook    []runtime.Object
	// webhookURL is the control plane process's webhook server, which the
	// webhook configurations point at instead of its Service.
	webhookURL string
}

func setup(t *testing.T) *env {
	t.Helper()
	return setupWith(t, setupOptions{})
}

// setupOptions change what setupWith installs, for a test that needs a
// build or a control plane of its own.
type setupOptions struct {
	// agentFlags are go build flags for the sidecar's binary after
	// agentBuildFlags (TestBadVersion's crash-test tag).
	agentFlags []string
	// controlPlaneArgs are appended to the pods' control plane's
	// arguments.
	controlPlaneArgs []string
}

func setupWith(t *testing.T, o setupOptions) *env {
	t.Helper()
	// Pod Security: every namespace enforces baseline unless labelled
	// otherwise, as a cluster-wide default of the API server.
	e := startNodeWith(t, o.agentFlags, "--admission-control-config-file="+podSecurityDefaults(t, t.TempDir()))
	c, dir, meshdns := e.c, e.dir, e.meshdns
	// The control plane as a process with the ServiceAccount and RBAC of
	// the manifests, serving gRPC on the node address the pods reach.
	rest := applyManifests(t, c, "00-namespace.yaml", "10-rbac.yaml", "40-webhook.yaml")
	kubeconfig := serviceAccountKubeconfig(t, c, dir, "meshdns-system", "meshdns-controlplane")
	grpcAddr := freePort(t, nodetest.NodeIP.String())
	adminAddr := freePort(t, "127.0.0.1")
	webhookAddr := freePort(t, "127.0.0.1")
	template := filepath.Join(dir, "template.yaml")
	e.template, e.grpcAddr, e.adminAddr = template, grpcAddr, adminAddr
	if err := os.WriteFile(template, []byte(templateText(grpcAddr)), 0o644); err != nil {
		t.Fatal(err)
	}
	// The webhook configuration of the manifests, with no caBundle: the
	// control plane makes its certificate and sets the caBundle itself.
	e.webhookURL = "https://" + webhookAddr
	registerWebhook(t, c, rest, e.webhookURL)
	e.webhook = rest
	// The secure default: agents dial TLS (the self-managed certificate,
	// which also names the node address they dial; its CA is what the
	// webhook gives them) and present their projected token, which the
	// control plane verifies with the TokenReview API.
	startControlPlane(t, "controlplane", meshdns, dir, adminAddr, append([]string{
		"--kubeconfig", kubeconfig, "--grpc-addr", grpcAddr, "--admin-addr", adminAddr, "--grpc-self-signed",
		"--webhook-addr", webhookAddr, "--webhook-secret", "meshdns-system/meshdns-webhook-certs",
		"--webhook-dns-names", "127.0.0.1," + nodetest.NodeIP.String(), "--inject-template", template}, o.controlPlaneArgs...)...)

	// VMs have no pod to bind a token to: as in examples/overlays/vm, they
	// stream from a control plane serving mTLS, whose SPIFFE client
	// certificates give the namespace.
	e.vm = newVMCredentials(t, dir, "demo", "node1-host")
	e.vmGRPCAddr = freePort(t, nodetest.NodeIP.String())
	vmAdmin := freePort(t, "127.0.0.1")
	startControlPlane(t, "controlplane-vm", meshdns, dir, vmAdmin,
		"--kubeconfig", kubeconfig, "--grpc-addr", e.vmGRPCAddr, "--admin-addr", vmAdmin,
		"--tls-cert", e.vm.serverCert, "--tls-key", e.vm.serverKey, "--client-ca", e.vm.ca)
	return e
}

// startNode builds the binaries, starts the API server (RBAC on, the
// ServiceAccount admission plugin on, apiArgs) and the node, the DNS
// stand-in, and loads the images: a cluster with nothing of meshdns.
func startNode(t *testing.T, apiArgs ...string) *env {
	t.Helper()
	return startNodeWith(t, nil, apiArgs...)
}

// startNodeWith is startNode with go build flags for the sidecar's binary
// after agentBuildFlags.
func startNodeWith(t *testing.T, agentFlags []string, apiArgs ...string) *env {
	t.Helper()
	testenv.RequireRoot(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	meshdns, agent, app := filepath.Join(dir, "meshdns"), filepath.Join(dir, "meshdns-agent"), filepath.Join(dir, "testapp")
	buildStatic(t, "./cmd/meshdns", meshdns)
	buildStatic(t, archtest.AgentMain, agent, append(slices.Clone(agentBuildFlags), agentFlags...)...)
	buildStatic(t, "./e2e/node/testapp", app)

	// The ServiceAccount admission plugin on (kubetest turns it off), as in
	// every cluster: pods run as their ServiceAccount, and the kubelet gets
	// their projected tokens (the agent's, audience meshdns) from the
	// TokenRequest API, signed with kubetest's service-account key.
	c := kubetest.Start(t, kubetest.WithRBAC(), kubetest.WithArgs(append(apiArgs, "--disable-admission-plugins=")...))
	defaultServiceAccounts(t, c)
	n := nodetest.Start(t, c, nodetest.Options{Search: []string{"corp.example.com"}})
	e := &env{c: c, n: n, standIn: startStandIn(t), dir: dir, meshdns: meshdns}

	// The project's image, as `make image` writes it (hack/image), for
	// this machine's platform; the test application's image from its
	// static binary.
	if err := n.ImportArchive(projectImage(t, meshdns, agent, dir)); err != nil {
		t.Fatal(err)
	}
	if err := n.LoadImage(nodetest.Image{Name: "testapp", Files: map[string]string{"/bin/testapp": app},
		Entrypoint: []string{"/bin/testapp"}, User: "1000:1000"}); err != nil {
		t.Fatal(err)
	}

	return e
}

// startControlPlane runs `meshdns controlplane args...` until the test
// ends and waits for it to be ready on its admin address.
func startControlPlane(t *testing.T, name, meshdns, dir, adminAddr string, args ...string) {
	t.Helper()
	runControlPlane(t, t, name, meshdns, filepath.Join(dir, name+".log"), adminAddr, append([]string{"controlplane"}, args...))
}

// runControlPlane starts bin with args (the subcommand first) and waits,
// in t, until it is ready on adminAddr; owner's cleanup stops it and, when
// owner failed, logs the end of its output. The owner is the test whose
// later parts the control plane serves.
func runControlPlane(t, owner *testing.T, name, bin, logPath, adminAddr string, args []string) {
	t.Helper()
	cp, err := kubetest.StartProcess(name, bin, logPath, args)
	if err != nil {
		t.Fatal(err)
	}
	owner.Cleanup(func() {
		if owner.Failed() {
			owner.Logf("%s log:\n%s", name, cp.Tail(6000))
		}
		cp.Stop(5 * time.Second)
	})
	testenv.Eventually(t, name+" ready", time.Minute, func() bool {
		if cp.Exited() {
			t.Fatalf("%s exited:\n%s", name, cp.Tail(4000))
		}
		r, err := http.Get("http://" + adminAddr + "/healthz/ready")
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	})
}

// replaceControlPlane stops the control plane pid as the kubelet does
// (SIGTERM), waits until it is gone, then runs bin with the same args in
// its place (runControlPlane).
func replaceControlPlane(t, owner *testing.T, e *env, pid int, name, bin string, args []string) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the old control plane gone", 30*time.Second, func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
		return os.IsNotExist(err)
	})
	runControlPlane(t, owner, name, bin, filepath.Join(e.dir, name+".log"), flagValue(args, "--admin-addr"), args)
}

// TestNode runs meshdns on one real node, one part after the other (a node
// and its control plane take a minute to set up).
func TestNode(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	// The init container needs NET_ADMIN: its namespace allows privileged
	// pods (the cluster default is baseline).
	e.createNamespace(t, ctx, "demo", map[string]string{"meshdns.io/inject": "enabled", "pod-security.kubernetes.io/enforce": "privileged"})
	e.createNamespace(t, ctx, "plain", nil)
	t.Run("InjectedPod", func(t *testing.T) { testInjectedPod(t, e) })
	t.Run("QueryLogAnnotation", func(t *testing.T) { testQueryLogAnnotation(t, e) })
	t.Run("ServiceChanges", func(t *testing.T) { testServiceChanges(t, e) })
	t.Run("PodZone", func(t *testing.T) { testPodZone(t, e) })
	t.Run("Policy", func(t *testing.T) { testPolicy(t, e) })
	t.Run("SidecarRestart", func(t *testing.T) { testSidecarRestart(t, e) })
	t.Run("UninjectedNamespace", func(t *testing.T) { testUninjected(t, e) })
	t.Run("StartLatencyAndMemory", func(t *testing.T) { testStartLatency(t, e) })
	t.Run("VMOnTheNodeHost", func(t *testing.T) { testVM(t, e) })
	t.Run("CARotation", func(st *testing.T) { testCARotation(st, t, e) }) // the restarted control plane serves what follows
	t.Run("Upgrade", func(st *testing.T) { testUpgrade(st, t, e) })       // the new control plane serves what follows
	// Last: it turns the control plane's template to CNI mode.
	t.Run("PodSecurity", func(t *testing.T) { testPodSecurity(t, e) })
}

// testInjectedPod is the whole chain in a kubelet pod: the webhook injects
// it, the init container programs the pod's own network namespace, the
// sidecar gets its table over gRPC, and an unmodified application resolves
// service names, SRV, a headless endpoint and an external name through it,
// with its resolv.conf as the kubelet wrote it.
func testInjectedPod(t *testing.T, e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := e.c.Client
	web, err := cs.CoreV1().Services("demo").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	createHeadless(t, ctx, e, "demo", "hl", "pod-0", "10.244.0.200")
	// A service only demo's pods may see.
	only, err := cs.CoreV1().Services("demo").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "only", Annotations: map[string]string{"meshdns.io/export-to": "demo"}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Services("demo").Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "front"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "web.demo.svc.cluster.local"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	names := []string{"web", "web.demo", "web.demo.svc.cluster.local", "_http._tcp.web.demo.svc.cluster.local.",
		"pod-0.hl", "www.example.org", "web.corp.example.com", "front", "10-244-0-7.demo.pod.cluster.local", "only"}
	pod := appPod("app", names)
	if _, err := cs.CoreV1().Pods("demo").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, ok := e.waitRound(t, "demo", "app", names)
	if !ok {
		t.Fatalf("the application never resolved every name: %v", got)
	}
	t.Logf("the application resolved: %v", got)
	want := map[string]string{
		"web": web.Spec.ClusterIP, "web.demo": web.Spec.ClusterIP, "web.demo.svc.cluster.local": web.Spec.ClusterIP,
		"_http._tcp.web.demo.svc.cluster.local.": "web.demo.svc.cluster.local.:80",
		"pod-0.hl":                               "10.244.0.200",
		"www.example.org":                        externalIP,
		// The node's search domain: the corporate host, not the service.
		"web.corp.example.com": corpWebIP,
		// An ExternalName to a service: answered in the pod.
		"front": web.Spec.ClusterIP,
		// A pod name, synthesized as kubeadm's CoreDNS does.
		"10-244-0-7.demo.pod.cluster.local": "10.244.0.7",
		"only":                              only.Spec.ClusterIP,
	}
	for name, w := range want {
		if got[name] != "ok "+w {
			t.Errorf("%s: %q, want ok %s", name, got[name], w)
		}
	}
	p, err := cs.CoreV1().Pods("demo").Get(ctx, "app", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Annotations["meshdns.io/status"] == "" || len(p.Spec.InitContainers) < 2 {
		t.Errorf("pod not injected: annotations %v, %d init containers", p.Annotations, len(p.Spec.InitContainers))
	}
	// The sidecar got its table over TLS with the pod's own identity: the
	// webhook gave it the control plane's CA and a projected token, and
	// the control plane admitted its stream on the TokenReview verdict
	// (no other way in: it runs without --insecure-allow-unauthenticated).
	var agentArgs []string
	for _, c := range p.Spec.InitContainers {
		if c.Name == webhook.AgentContainerName {
			agentArgs = c.Args
		}
	}
	if a := strings.Join(agentArgs, " "); !strings.Contains(a, "--ca-cert") || !strings.Contains(a, "--token-file") {
		t.Errorf("the sidecar dials without the control plane's CA or its token: %v", agentArgs)
	}
	if n := e.admissions(t, "ok", "token"); n < 1 {
		t.Errorf("the control plane admitted %d streams by ServiceAccount token, want the sidecar's", n)
	} else {
		t.Logf("the control plane admitted %d agent streams by verified ServiceAccount token", n)
	}
	testForeignNamespace(t, ctx, e, web.Spec.ClusterIP)

	// The kubelet's resolv.conf, untouched: the redirect is iptables only.
	logs := e.n.ContainerLog("demo", "app", "app")
	for _, line := range []string{"RESOLV nameserver " + nodetest.NodeIP.String(),
		"RESOLV search demo.svc.cluster.local svc.cluster.local cluster.local corp.example.com"} {
		if !strings.Contains(logs, line+"\n") {
			t.Errorf("resolv.conf lacks %q:\n%s", line, logs)
		}
	}
	// Cluster names were answered in the pod; only the external name (and
	// nothing of the cluster) reached the cluster DNS.
	if e.standIn.asked("www.example.org.") == 0 {
		t.Errorf("the external name never reached the cluster DNS")
	}
	if e.standIn.asked("web.corp.example.com.") == 0 {
		t.Errorf("web.corp.example.com never reached the cluster DNS: the agent answered it")
	}
	for _, n := range []string{"web.demo.svc.cluster.local.", "front.demo.svc.cluster.local.", "10-244-0-7.demo.pod.cluster.local."} {
		if k := e.standIn.asked(n); k > 0 {
			t.Errorf("%s reached the cluster DNS %d times; the agent should answer it", n, k)
		}
	}
}

// createHeadless creates a headless Service with one ready endpoint named
// host, as the EndpointSlice controller (not running here) would.
func createHeadless(t *testing.T, ctx context.Context, e *env, ns, name, host, ip string) {
	t.Helper()
	cs := e.c.Client
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready, port, proto, pname := true, int32(80), corev1.ProtocolTCP, "http"
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{ip}, Hostname: &host,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
		Ports: []discoveryv1.EndpointPort{{Name: &pname, Port: &port, Protocol: &proto}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// appPod is the application: testapp resolving names every 200 ms.
func appPod(name string, names []string) *corev1.Pod {
	no, zero := false, int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{
			NodeName:                      nodetest.NodeName,
			AutomountServiceAccountToken:  &no,
			TerminationGracePeriodSeconds: &zero,
			Containers: []corev1.Container{{Name: "app", Image: "localhost/testapp:test", ImagePullPolicy: corev1.PullNever,
				Args: append([]string{"-every", "200ms"}, names...)}},
		},
	}
}

// waitRound waits until one round of the app's lookups answered every name,
// and returns the last result of each ("ok <answers>" or "err <error>").
func (e *env) waitRound(t *testing.T, ns, pod string, names []string) (map[string]string, bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	var last map[string]string
	for time.Now().Before(deadline) {
		last = map[string]string{}
		for _, line := range strings.Split(e.n.ContainerLog(ns, pod, "app"), "\n") {
			f := strings.SplitN(line, " ", 4)
			if len(f) == 4 && f[0] == "RESULT" {
				last[f[2]] = f[3]
			}
		}
		all := true
		for _, n := range names {
			all = all && strings.HasPrefix(last[n], "ok ")
		}
		if all {
			return last, true
		}
		time.Sleep(200 * time.Millisecond)
	}
	return last, false
}
