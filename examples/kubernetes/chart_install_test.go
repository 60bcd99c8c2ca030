package kubernetes_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
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

// refused runs a helm command that must fail, with a message containing want.
func (r chartRelease) refused(want string, args ...string) {
	r.t.Helper()
	cmd := exec.Command(helmBinary(r.t), append(args, "--kubeconfig", r.kc.Kubeconfig, "--namespace", r.ns)...)
	dir := r.t.TempDir()
	cmd.Env = append(os.Environ(), "HELM_CONFIG_HOME="+dir, "HELM_CACHE_HOME="+dir, "HELM_DATA_HOME="+dir)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), want) {
		r.t.Errorf("helm %s: want a refusal saying %q, got %v:\n%s", strings.Join(args, " "), want, err, out)
	}
}

// annotate merges annotations into a cluster-scoped object (a nil value
// removes one), as kubectl annotate does.
func annotate(ctx context.Context, t *testing.T, dyn dynamic.Interface, gvr schema.GroupVersionResource, name string, a map[string]any) {
	t.Helper()
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": a}})
	if _, err := dyn.Resource(gvr).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatalf("annotate %s %s: %v", gvr.Resource, name, err)
	}
}

var (
	crdGVR       = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	namespaceGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
)

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
	writeCABundle(ctx, t, kc.Client)
	dyn, err := dynamic.NewForConfig(kc.Config)
	if err != nil {
		t.Fatal(err)
	}
	users := kc.Namespace(t, "team")
	for _, ns := range []string{users, "meshdns-system"} {
		createPolicy(ctx, t, dyn, ns)
	}

	// A CRD that an older chart (0.1.0) installed from its templates is
	// the release's: an upgrade that no longer renders it would delete it
	// and every DNSPolicy, so the chart refuses until it is kept.
	owned := map[string]any{"meta.helm.sh/release-name": "meshdns", "meta.helm.sh/release-namespace": "meshdns-system"}
	annotate(ctx, t, dyn, crdGVR, "dnspolicies.meshdns.io", owned)
	r.refused("kubectl annotate crd dnspolicies.meshdns.io helm.sh/resource-policy=keep", "upgrade", "meshdns", chartDir)
	annotate(ctx, t, dyn, crdGVR, "dnspolicies.meshdns.io", map[string]any{keep: "keep"})

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
	if hook, err := kc.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "meshdns-sidecar-injector", metav1.GetOptions{}); err != nil || len(hook.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Errorf("the upgrade emptied the caBundle the control plane wrote (err %v)", err)
	}

	r.helm("uninstall", "meshdns")
	checkUninstalled(ctx, t, kc.Client)
	checkKept(ctx, t, kc.Client, dyn, "meshdns-system", users)

	// A second install adopts nothing and finds the policies served.
	r.helm("install", "meshdns", chartDir)
	checkKept(ctx, t, kc.Client, dyn, "meshdns-system", users)
	r.helm("uninstall", "meshdns")
	checkApartNamespace(ctx, t, kc, dyn)
}

// checkApartNamespace: the control plane in a namespace apart from the
// release's, which the chart creates (createNamespace): helm uninstall
// leaves it too.
func checkApartNamespace(ctx context.Context, t *testing.T, kc *kubetest.Cluster, dyn dynamic.Interface) {
	t.Helper()
	apart := chartRelease{t: t, kc: kc, ns: "default"}
	apart.helm("install", "apart", chartDir, "--set", "namespace=meshdns-apart", "--set", "createNamespace=true")
	if _, err := kc.Client.AppsV1().Deployments("meshdns-apart").Get(ctx, "meshdns-controlplane", metav1.GetOptions{}); err != nil {
		t.Errorf("control plane in the namespace the chart created: %v", err)
	}
	createPolicy(ctx, t, dyn, "meshdns-apart")
	// The namespace as an older chart left it (no keep): an upgrade that
	// stops rendering it is refused.
	annotate(ctx, t, dyn, namespaceGVR, "meshdns-apart", map[string]any{keep: nil})
	apart.refused("would delete namespace meshdns-apart", "upgrade", "apart", chartDir, "--set", "namespace=meshdns-apart")
	apart.helm("upgrade", "apart", chartDir, "--set", "namespace=meshdns-apart", "--set", "createNamespace=true")
	apart.helm("uninstall", "apart")
	checkUninstalled(ctx, t, kc.Client)
	checkKept(ctx, t, kc.Client, dyn, "meshdns-apart")
}

// writeCABundle writes a caBundle into the webhook configuration as the
// control plane does.
func writeCABundle(ctx context.Context, t *testing.T, c kubernetes.Interface) {
	t.Helper()
	hooks := c.AdmissionregistrationV1().MutatingWebhookConfigurations()
	hook, err := hooks.Get(ctx, "meshdns-sidecar-injector", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hook.Webhooks[0].ClientConfig.CABundle = []byte("-----BEGIN CERTIFICATE-----\nstand-in\n-----END CERTIFICATE-----\n")
	if _, err := hooks.Update(ctx, hook, metav1.UpdateOptions{FieldManager: "meshdns-controlplane"}); err != nil {
		t.Fatal(err)
	}
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
