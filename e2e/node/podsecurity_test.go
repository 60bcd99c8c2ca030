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

	"github.com/meshdns/meshdns/cni"
	"github.com/meshdns/meshdns/controlplane/webhook"
	"github.com/meshdns/meshdns/internal/nodetest"
	"github.com/meshdns/meshdns/internal/testenv"
)

// templateText is the injection template of the test: the image built
// here, the control plane on the node, and the redirect by the init
// container or (cni) by the node's CNI plugin.
func templateText(grpcAddr string, cni bool) string {
	// plaintext: the control plane here serves plaintext gRPC (and runs
	// with --insecure-allow-unauthenticated); the token and TLS path is
	// tested against a real API server in controlplane/server.
	s := "image: localhost/meshdns:test\nimagePullPolicy: Never\nplaintext: true\ncontrolPlane: " + grpcAddr + "\n"
	if cni {
		s += "cni: true\n"
	}
	return s
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
// NET_ADMIN would have them rejected, so the DaemonSet of
// examples/kubernetes/cni installs the CNI plugin on the node, the template
// turns to CNI mode, and the pods resolve through their agent with no
// privilege in the pod.
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
	// CNI mode: the webhook no longer leaves out namespaces that enforce
	// baseline or restricted (examples/kubernetes/cni/README.md).
	dropPodSecurityExclusion(t, ctx, e)

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

	installCNI(t, ctx, e)

	if err := os.WriteFile(e.template, []byte(templateText(e.grpcAddr, true)), 0o644); err != nil {
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

// dropPodSecurityExclusion removes the webhook entries' Pod Security
// expressions, as the CNI mode's install does.
func dropPodSecurityExclusion(t *testing.T, ctx context.Context, e *env) {
	t.Helper()
	cl := e.c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	testenv.Eventually(t, "the webhook configuration updated", 30*time.Second, func() bool {
		mwc, err := cl.Get(ctx, "meshdns-sidecar-injector", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range mwc.Webhooks {
			sel := mwc.Webhooks[i].NamespaceSelector
			sel.MatchExpressions = slices.DeleteFunc(sel.MatchExpressions, func(r metav1.LabelSelectorRequirement) bool {
				return r.Key == "pod-security.kubernetes.io/enforce"
			})
		}
		_, err = cl.Update(ctx, mwc, metav1.UpdateOptions{})
		return err == nil // a conflict with the control plane's caBundle patch is retried
	})
}

// installCNI runs the DaemonSet of examples/kubernetes/cni on the node: no
// controller manager runs here, so its pod template becomes a pod bound to
// the node, with the node's CNI directories as its host paths.
func installCNI(t *testing.T, ctx context.Context, e *env) {
	t.Helper()
	cs := e.c.Client
	rest := applyManifests(t, e.c, "cni/60-cni.yaml")
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
		t.Fatal("no DaemonSet in cni/60-cni.yaml")
	}
	// The DaemonSet itself goes to the API server as written (validation,
	// Pod Security of its namespace); no controller turns it into pods.
	if _, err := cs.AppsV1().DaemonSets(ds.Namespace).Create(ctx, ds, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
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
	// the node, uses the API server's own address.
	c.Args = append(c.Args, "--kube-server="+e.c.URL)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: ds.Name + "-" + nodetest.NodeName, Namespace: ds.Namespace,
		Labels: ds.Spec.Template.Labels}, Spec: *spec}
	if _, err := cs.CoreV1().Pods(ds.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	conf := filepath.Join(e.n.CNIConfDir, nodetest.CNIConfName)
	testenv.Eventually(t, "meshdns-cni chained into the node's network by the DaemonSet's pod", time.Minute, func() bool {
		b, err := os.ReadFile(conf)
		_, binErr := os.Stat(filepath.Join(e.n.CNIBinDir, cni.PluginType))
		return err == nil && strings.Contains(string(b), cni.PluginType) && binErr == nil &&
			strings.Contains(e.n.ContainerLog(ds.Namespace, pod.Name, "install"), "meshdns-cni installed")
	})
}
