package node

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/cni"
	"github.com/meshdns/meshdns/controlplane/webhook"
	"github.com/meshdns/meshdns/internal/testkit/kustomizetest"
	"github.com/meshdns/meshdns/internal/testkit/nodetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// templateText is the injection template of the test's init container
// mode: the image built here and the control plane on the node (CNI mode
// takes the overlay's template, cniTemplate).
func templateText(grpcAddr string) string {
	// The default security: the agent dials TLS, trusting the control
	// plane's CA, and presents its projected token.
	return "image: localhost/meshdns:test\nimagePullPolicy: Never\ncontrolPlane: " + grpcAddr + "\n"
}

// cniTemplate is the injection template of the rendered CNI overlay (its
// ConfigMap meshdns-inject) with what differs on this node: the image built
// here, and the control plane process on the node's address.
func cniTemplate(t *testing.T, objs []*unstructured.Unstructured, grpcAddr string) []byte {
	t.Helper()
	text, _, _ := unstructured.NestedString(kustomizetest.Find(t, objs, "ConfigMap", "meshdns-inject").Object, "data", "template.yaml")
	var m map[string]any
	if err := yaml.Unmarshal([]byte(text), &m); err != nil {
		t.Fatalf("the overlay's template: %v", err)
	}
	if m["cni"] != true {
		t.Fatalf("the overlay's template does not turn CNI mode on:\n%s", text)
	}
	// The overlay's security as it is: TLS with the control plane's CA and
	// the pod's projected token.
	m["image"], m["imagePullPolicy"], m["controlPlane"] = "localhost/meshdns:test", "Never", grpcAddr
	out, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// podSecurityDefaults writes the API server's admission configuration: Pod
// Security enforces baseline in every namespace without a label of its own.
func podSecurityDefaults(t *testing.T, dir string) string {
	t.Helper()
	path := filepath.Join(dir, "admission.yaml")
	const cfg = `apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
  - name: PodSecurity
    configuration:
      apiVersion: pod-security.admission.config.k8s.io/v1
      kind: PodSecurityConfiguration
      defaults:
        enforce: baseline
        enforce-version: latest
      exemptions: {}
`
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// restrictedPod is the application pod as the restricted level wants it.
func restrictedPod(name string, names []string) *corev1.Pod {
	p := appPod(name, names)
	no, yes := false, true
	uid := int64(1000)
	p.Spec.SecurityContext = &corev1.PodSecurityContext{
		RunAsNonRoot:   &yes,
		RunAsUser:      &uid,
		SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
	}
	p.Spec.Containers[0].SecurityContext = &corev1.SecurityContext{
		AllowPrivilegeEscalation: &no,
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	}
	return p
}

// testPodSecurity runs injected pods in namespaces enforcing restricted
// (label) and baseline (the cluster default): the init container's
// NET_ADMIN would have them rejected, so meshdns is installed in CNI mode
// from the rendered examples/overlays/cni (what `kubectl apply -k` applies):
// its webhook configuration, its DaemonSet installing the CNI plugin on the
// node, its template with cni: true; and the pods resolve through their
// agent with no privilege in the pod.
func testPodSecurity(t *testing.T, e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cs := e.c.Client
	web := e.webService(t)
	for name, level := range map[string]string{"strict": "restricted", "base": ""} {
		labels := map[string]string{"meshdns.io/inject": "enabled"}
		if level != "" {
			labels["pod-security.kubernetes.io/enforce"] = level
		}
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	overlay := kustomizetest.Render(t, "../../examples", "overlays/cni", nil)
	// The overlay's objects go in an order that first shows what the rest
	// repairs. Its webhook configuration no longer leaves out namespaces
	// that enforce baseline or restricted.
	applyWebhook(t, ctx, e, kustomizetest.Find(t, overlay, "MutatingWebhookConfiguration", "meshdns-sidecar-injector"))

	// Before CNI mode, the injected pod is what Pod Security rejects; this
	// is what the rest of the test repairs.
	names := []string{"web.demo", "web.demo.svc.cluster.local", "www.example.org"}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	// (The API server applies the changed webhook configuration after a
	// moment: until then the restricted namespace is still left out.)
	for _, ns := range []string{"strict", "base"} {
		var err error
		testenv.Eventually(t, "the init container rejected in "+ns, 30*time.Second, func() bool {
			_, err = cs.CoreV1().Pods(ns).Create(ctx, restrictedPod("dry", names), dry)
			return err != nil
		})
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "NET_ADMIN") {
			t.Fatalf("the init container mode in %s: %v, want forbidden for NET_ADMIN", ns, err)
		}
	}

	installCNI(t, ctx, e, overlay)

	// The overlay's ConfigMap, as the control plane process reads it here.
	if err := os.WriteFile(e.template, cniTemplate(t, overlay, e.grpcAddr), 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the webhook in CNI mode", time.Minute, func() bool {
		p, err := cs.CoreV1().Pods("strict").Create(ctx, restrictedPod("dry", names), dry)
		return err == nil && p.Annotations[cni.AnnotationRedirect] != ""
	})

	for _, ns := range []string{"strict", "base"} {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, restrictedPod("app", names), metav1.CreateOptions{}); err != nil {
			t.Fatalf("%s: %v", ns, err)
		}
	}
	level := map[string]string{"strict": "restricted (namespace label)", "base": "baseline (cluster default)"}
	for _, ns := range []string{"strict", "base"} {
		got, ok := e.waitRound(t, ns, "app", names)
		if !ok {
			t.Fatalf("%s: the application never resolved every name through its agent: %v", ns, got)
		}
		for _, n := range names[:2] {
			if got[n] != "ok "+web.Spec.ClusterIP {
				t.Errorf("%s: %s answered %q, want the ClusterIP %s", ns, n, got[n], web.Spec.ClusterIP)
			}
		}
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "app", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var init []string
		for _, c := range p.Spec.InitContainers {
			init = append(init, c.Name)
			if sc := c.SecurityContext; sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Add) > 0 {
				t.Errorf("%s: %s asks for capabilities: %+v", ns, c.Name, sc)
			}
		}
		if !slices.Equal(init, []string{webhook.AgentContainerName}) {
			t.Errorf("%s: init containers %v, want the agent only", ns, init)
		}
		t.Logf("%s, Pod Security %s: the application resolved %v", ns, level[ns], got)
	}
	// Cluster names were answered in the pods: only the agents could, the
	// cluster DNS stand-in does not know them.
	if k := e.standIn.asked("web.demo.svc.cluster.local."); k > 0 {
		t.Errorf("web.demo.svc.cluster.local reached the cluster DNS %d times", k)
	}
	// The runtime keeps the plugin's stderr in its log.
	log, err := os.ReadFile(filepath.Join(e.n.Dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	var applied []string
	for _, line := range strings.Split(string(log), "\n") {
		if strings.Contains(line, "DNS redirect applied") {
			applied = append(applied, line)
		}
	}
	if len(applied) < 2 {
		t.Errorf("the node's log has %d lines of the plugin applying a redirect, want one per pod", len(applied))
	} else {
		t.Logf("the plugin, in the runtime's log: %s", applied[0])
	}
}

// applyWebhook server-side applies the rendered webhook configuration over
// the installed one, as `kubectl apply --server-side` would, pointed at the
// control plane process (registerWebhook). The caBundle the control plane
// wrote is its own field and stays.
func applyWebhook(t *testing.T, ctx context.Context, e *env, mwc *unstructured.Unstructured) {
	t.Helper()
	mwc = mwc.DeepCopy()
	hooks, _, _ := unstructured.NestedSlice(mwc.Object, "webhooks")
	for _, h := range hooks {
		h := h.(map[string]any)
		path, _, _ := unstructured.NestedString(h, "clientConfig", "service", "path")
		h["clientConfig"] = map[string]any{"url": e.webhookURL + path}
	}
	if err := unstructured.SetNestedSlice(mwc.Object, hooks, "webhooks"); err != nil {
		t.Fatal(err)
	}
	data, err := mwc.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	force := true
	cl := e.c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	got, err := cl.Patch(ctx, mwc.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{FieldManager: "meshdns-install", Force: &force})
	if err != nil {
		t.Fatalf("apply the overlay's webhook configuration: %v", err)
	}
	for _, w := range got.Webhooks {
		if w.ClientConfig.URL == nil || !strings.HasPrefix(*w.ClientConfig.URL, e.webhookURL) {
			t.Errorf("webhook %s: client config %+v, want the control plane process", w.Name, w.ClientConfig)
		}
		for _, r := range w.NamespaceSelector.MatchExpressions {
			if r.Key == "pod-security.kubernetes.io/enforce" {
				t.Errorf("webhook %s still leaves out namespaces by %v after the overlay", w.Name, r)
			}
		}
	}
}

// installCNI creates the CNI plugin's objects of the rendered overlay
// (namespace meshdns-cni, its access, the DaemonSet) and runs the DaemonSet
// on the node: no controller manager runs here, so its pod template becomes
// a pod bound to the node, with the node's CNI directories as its host
// paths.
func installCNI(t *testing.T, ctx context.Context, e *env, overlay []*unstructured.Unstructured) *appsv1.DaemonSet {
	t.Helper()
	cs := e.c.Client
	var rest []runtime.Object
	for _, o := range overlay {
		if o.GetNamespace() != "meshdns-cni" && o.GetName() != "meshdns-cni" {
			continue
		}
		data, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		obj, _, err := scheme.Codecs.UniversalDeserializer().Decode(data, nil, nil)
		if err != nil {
			t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
		}
		if !createAccess(t, e.c, obj) {
			rest = append(rest, obj)
		}
	}
	// What kube-controller-manager's root CA publisher would create.
	if _, err := cs.CoreV1().ConfigMaps("meshdns-cni").Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "kube-root-ca.crt"},
		Data:       map[string]string{"ca.crt": string(e.c.CAPEM)},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ds *appsv1.DaemonSet
	for _, o := range rest {
		if d, ok := o.(*appsv1.DaemonSet); ok {
			ds = d
		}
	}
	if ds == nil {
		t.Fatal("no DaemonSet meshdns-cni in the overlay")
	}
	// The DaemonSet itself goes to the API server as written (validation,
	// Pod Security of its namespace); no controller turns it into pods.
	if _, err := cs.AppsV1().DaemonSets(ds.Namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	startInstallerPod(t, ctx, e, ds)
	return ds
}

// startInstallerPod does what the DaemonSet controller would on the node:
// a pod of the DaemonSet's template bound to the node, with the node's CNI
// directories as its host paths; it waits until the pod has installed the
// plugin.
func startInstallerPod(t *testing.T, ctx context.Context, e *env, ds *appsv1.DaemonSet) *corev1.Pod {
	t.Helper()
	cs := e.c.Client
	spec := ds.Spec.Template.Spec.DeepCopy()
	spec.NodeName = nodetest.NodeName
	for i := range spec.Volumes {
		if hp := spec.Volumes[i].HostPath; hp != nil {
			hp.Path = map[string]string{"/opt/cni/bin": e.n.CNIBinDir, "/etc/cni/net.d": e.n.CNIConfDir}[hp.Path]
		}
	}
	c := &spec.Containers[0]
	c.Image, c.ImagePullPolicy = "localhost/meshdns:test", corev1.PullNever
	for i, a := range c.Args {
		if strings.HasPrefix(a, "--host-conf-dir=") {
			c.Args[i] = "--host-conf-dir=" + e.n.CNIConfDir
		}
	}
	// No kube-proxy routes the kubernetes Service here: the plugin, on
	// the node, and the preStop hook use the API server's own address.
	c.Args = append(c.Args, "--kube-server="+e.c.URL)
	if l := c.Lifecycle; l != nil && l.PreStop != nil && l.PreStop.Exec != nil {
		l.PreStop.Exec.Command = append(l.PreStop.Exec.Command, "--kube-server="+e.c.URL)
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-" + nodetest.NodeName, Namespace: ds.Namespace,
		Labels: ds.Spec.Template.Labels}, Spec: *spec}
	pod, err := cs.CoreV1().Pods(ds.Namespace).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(e.n.CNIConfDir, nodetest.CNIConfName)
	testenv.Eventually(t, "meshdns-cni chained into the node's network by the DaemonSet's pod", time.Minute, func() bool {
		b, err := os.ReadFile(conf)
		_, binErr := os.Stat(filepath.Join(e.n.CNIBinDir, cni.PluginType))
		return err == nil && strings.Contains(string(b), cni.PluginType) && binErr == nil &&
			strings.Contains(e.n.ContainerLog(ds.Namespace, pod.Name, "install"), "meshdns-cni installed")
	})
	return pod
}
