package kubernetes_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/meshdns/meshdns/internal/kubetest"
)

// chartRelease runs helm against one real API server, in one namespace.
type chartRelease struct {
	t  *testing.T
	kc *kubetest.Cluster
	ns string
}

func (r chartRelease) helm(args ...string) string {
	r.t.Helper()
	return string(helm(r.t, append(args, "--kubeconfig", r.kc.Kubeconfig, "--namespace", r.ns)...))
}

// TestChartInstall installs the chart the way charts are installed (helm
// install -n NS --create-namespace), upgrades it (to another tag with both
// overlays' values on) and uninstalls it with the real helm against a real
// API server: the upgrade keeps the caBundle the control plane wrote
// (helm's three-way merge leaves fields it never set), and the uninstall
// leaves the CRD, the users' DNSPolicy objects and the namespace, which a
// second install serves again.
func TestChartInstall(t *testing.T) {
	helmBinary(t) // before the API server starts
	kc := kubetest.Start(t)
	ctx := context.Background()
	r := chartRelease{t: t, kc: kc, ns: "meshdns-system"}
	notes := r.helm("install", "meshdns", chartDir, "--create-namespace")
	for _, w := range []string{"kubectl -n meshdns-system rollout status deploy/meshdns-controlplane",
		"kubectl label namespace NAMESPACE meshdns.io/inject=enabled", "meshdns-agent"} {
		if !strings.Contains(notes, w) {
			t.Errorf("helm install's notes lack %q:\n%s", w, notes)
		}
	}
	if got := controlPlaneImage(t, kc.Client, "meshdns-system"); got != repo+":v0.1.0" {
		t.Errorf("installed image %s", got)
	}
	hooks := kc.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	hook, err := hooks.Get(ctx, "meshdns-sidecar-injector", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hook.Webhooks[0].ClientConfig.CABundle = []byte("-----BEGIN CERTIFICATE-----\nstand-in\n-----END CERTIFICATE-----\n")
	if _, err := hooks.Update(ctx, hook, metav1.UpdateOptions{FieldManager: "meshdns-controlplane"}); err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(kc.Config)
	if err != nil {
		t.Fatal(err)
	}
	users := kc.Namespace(t, "team")
	for _, ns := range []string{users, "meshdns-system"} {
		createPolicy(ctx, t, dyn, ns)
	}

	// The upgrade also turns both overlays' values on: the API server
	// takes the DaemonSet and the VM control plane.
	r.helm("upgrade", "meshdns", chartDir, "--set", "image.tag=v0.2.0", "--set", "cni.enabled=true", "--set", "vm.enabled=true")
	if got := controlPlaneImage(t, kc.Client, "meshdns-system"); got != repo+":v0.2.0" {
		t.Errorf("upgraded image %s", got)
	}
	if ds, err := kc.Client.AppsV1().DaemonSets("meshdns-system").Get(ctx, "meshdns-cni", metav1.GetOptions{}); err != nil || ds.Spec.Template.Spec.Containers[0].Image != repo+":v0.2.0" {
		t.Errorf("CNI DaemonSet after the upgrade: %v", err)
	}
	if _, err := kc.Client.AppsV1().Deployments("meshdns-system").Get(ctx, "meshdns-controlplane-vm", metav1.GetOptions{}); err != nil {
		t.Errorf("VM control plane after the upgrade: %v", err)
	}
	if hook, err = hooks.Get(ctx, "meshdns-sidecar-injector", metav1.GetOptions{}); err != nil || len(hook.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Errorf("the upgrade emptied the caBundle the control plane wrote (err %v)", err)
	}

	r.helm("uninstall", "meshdns")
	checkUninstalled(ctx, t, kc.Client)
	checkKept(ctx, t, kc.Client, dyn, "meshdns-system", users)

	// A second install adopts nothing and finds the policies served.
	r.helm("install", "meshdns", chartDir)
	checkKept(ctx, t, kc.Client, dyn, "meshdns-system", users)
	r.helm("uninstall", "meshdns")

	// The control plane in a namespace apart from the release's, which the
	// chart creates (createNamespace): helm uninstall leaves it too.
	apart := chartRelease{t: t, kc: kc, ns: "default"}
	apart.helm("install", "apart", chartDir, "--set", "namespace=meshdns-apart", "--set", "createNamespace=true")
	if _, err := kc.Client.AppsV1().Deployments("meshdns-apart").Get(ctx, "meshdns-controlplane", metav1.GetOptions{}); err != nil {
		t.Errorf("control plane in the namespace the chart created: %v", err)
	}
	createPolicy(ctx, t, dyn, "meshdns-apart")
	apart.helm("uninstall", "apart")
	checkUninstalled(ctx, t, kc.Client)
	checkKept(ctx, t, kc.Client, dyn, "meshdns-apart")
}

func controlPlaneImage(t *testing.T, c kubernetes.Interface, ns string) string {
	t.Helper()
	d, err := c.AppsV1().Deployments(ns).Get(context.Background(), "meshdns-controlplane", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return d.Spec.Template.Spec.Containers[0].Image
}

// createPolicy creates DNSPolicy "keep-me" in ns. helm waits for the CRD it
// installs to be established, so the first create is served.
func createPolicy(ctx context.Context, t *testing.T, dyn dynamic.Interface, ns string) {
	t.Helper()
	p := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "meshdns.io/v1alpha1", "kind": "DNSPolicy",
		"metadata": map[string]any{"name": "keep-me"},
		"spec": map[string]any{"rules": []any{map[string]any{"pattern": "api.stripe.com", "action": "Allow"}},
			"outsideDefault": "Deny"},
	}}
	if _, err := dyn.Resource(dnsPolicyGVR).Namespace(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create DNSPolicy in %s: %v", ns, err)
	}
}

// checkUninstalled: what the release made is gone.
func checkUninstalled(ctx context.Context, t *testing.T, c kubernetes.Interface) {
	t.Helper()
	if _, err := c.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "meshdns-sidecar-injector", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("webhook configuration after uninstall: %v", err)
	}
	for _, role := range []string{"meshdns-controlplane", "meshdns-cni", "meshdns-controlplane-vm"} {
		if _, err := c.RbacV1().ClusterRoles().Get(ctx, role, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("cluster role %s after uninstall: %v", role, err)
		}
	}
}

// checkKept: what users keep outlives helm uninstall: the namespaces are
// not being deleted, and every DNSPolicy is still served.
func checkKept(ctx context.Context, t *testing.T, c kubernetes.Interface, dyn dynamic.Interface, namespaces ...string) {
	t.Helper()
	for _, ns := range namespaces {
		n, err := c.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil || n.DeletionTimestamp != nil {
			t.Errorf("namespace %s: %v (deleting: %v)", ns, err, err == nil && n.DeletionTimestamp != nil)
		}
		p, err := dyn.Resource(dnsPolicyGVR).Namespace(ns).Get(ctx, "keep-me", metav1.GetOptions{})
		if err != nil || p.GetDeletionTimestamp() != nil {
			t.Errorf("DNSPolicy %s/keep-me: %v", ns, err)
		}
	}
}
