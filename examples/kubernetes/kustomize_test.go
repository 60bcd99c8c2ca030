package kubernetes_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/meshdns/meshdns/controlplane/webhook"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/kustomizetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

const repo = "ghcr.io/meshdns/meshdns"

// render builds the kustomization in dir (relative to examples/) as
// `kubectl apply -k` does, with the base's image tag replaced by tag when
// tag is not "" (an upgrade: the one line a release changes). The tree is
// not modified.
func render(t *testing.T, dir, tag string) []*unstructured.Unstructured {
	t.Helper()
	var edit func(string, []byte) []byte
	if tag != "" {
		edit = func(path string, data []byte) []byte {
			if path != "kubernetes/kustomization.yaml" {
				return data
			}
			re := regexp.MustCompile(`(?m)^(\s+newTag:) .*$`)
			if !re.Match(data) {
				t.Fatal("kustomization.yaml has no newTag line")
			}
			return re.ReplaceAll(data, []byte("${1} "+tag))
		}
	}
	return kustomizetest.Render(t, "..", dir, edit)
}

// images returns every image a rendered install names: containers, init
// containers, the image the control plane injects (MESHDNS_INJECT_IMAGE),
// and any image: line of the injection template.
func images(t *testing.T, objs []*unstructured.Unstructured) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, o := range objs {
		where := o.GetKind() + "/" + o.GetName()
		for _, field := range []string{"containers", "initContainers"} {
			cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", field)
			for _, c := range cs {
				c := c.(map[string]any)
				out[fmt.Sprint(c["image"])] = append(out[fmt.Sprint(c["image"])], where+" "+fmt.Sprint(c["name"]))
				envs, _ := c["env"].([]any)
				for _, e := range envs {
					e := e.(map[string]any)
					if e["name"] == "MESHDNS_INJECT_IMAGE" {
						out[fmt.Sprint(e["value"])] = append(out[fmt.Sprint(e["value"])], where+" MESHDNS_INJECT_IMAGE")
					}
				}
			}
		}
		if o.GetKind() == "ConfigMap" {
			data, _, _ := unstructured.NestedStringMap(o.Object, "data")
			for _, m := range regexp.MustCompile(`(?m)^image:\s*(\S+)`).FindAllStringSubmatch(data["template.yaml"], -1) {
				out[m[1]] = append(out[m[1]], where+" template")
			}
		}
	}
	return out
}

// TestKustomizeImageOnce: the base and the overlays name one image, the
// base's, everywhere an image is named, and a changed tag changes all of
// them.
func TestKustomizeImageOnce(t *testing.T) {
	want := want(t)
	for _, tc := range []struct {
		dir, tag, want string
		uses           int // how many places name it
	}{
		{dir: "kubernetes", want: want, uses: 2},
		{dir: "overlays/vm", want: want, uses: 3},
		{dir: "kubernetes", tag: "v9.9.9", want: repo + ":v9.9.9", uses: 2},
		{dir: "overlays/vm", tag: "v9.9.9", want: repo + ":v9.9.9", uses: 3},
		{dir: "overlays/cni", want: want, uses: 3},
		{dir: "overlays/cni", tag: "v9.9.9", want: repo + ":v9.9.9", uses: 3},
	} {
		t.Run(tc.dir+" "+tc.tag, func(t *testing.T) {
			got := images(t, render(t, tc.dir, tc.tag))
			if len(got) != 1 || len(got[tc.want]) != tc.uses {
				t.Errorf("images = %v, want %s in %d places", got, tc.want, tc.uses)
			}
		})
	}
}

// want is the image the base names.
func want(t *testing.T) string {
	t.Helper()
	base, err := os.ReadFile("kustomization.yaml")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s+newTag:\s*(\S+)$`).FindSubmatch(base)
	if m == nil {
		t.Fatal("kustomization.yaml has no newTag")
	}
	return repo + ":" + string(m[1])
}

// cluster is the install's view of a real API server: apply and delete
// rendered objects as kubectl does (server-side apply, one field manager).
type cluster struct {
	t      *testing.T
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newCluster(t *testing.T, c *kubetest.Cluster) *cluster {
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{t: t, dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}
}

func (c *cluster) resource(o *unstructured.Unstructured) dynamic.ResourceInterface {
	c.t.Helper()
	gvk := o.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		c.t.Fatalf("%s: no such resource in the API server: %v", gvk, err)
	}
	if o.GetNamespace() != "" {
		return c.dyn.Resource(m.Resource).Namespace(o.GetNamespace())
	}
	return c.dyn.Resource(m.Resource)
}

// apply server-side applies objs in order; with dryRun nothing is stored.
func (c *cluster) apply(ctx context.Context, objs []*unstructured.Unstructured, dryRun bool) {
	c.t.Helper()
	opts := metav1.ApplyOptions{FieldManager: "meshdns-install", Force: true}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, o := range objs {
		data, err := o.MarshalJSON()
		if err != nil {
			c.t.Fatal(err)
		}
		if _, err := c.resource(o).Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{
			FieldManager: opts.FieldManager, Force: &opts.Force, DryRun: opts.DryRun, FieldValidation: "Strict",
		}); err != nil {
			// Under a dry run the namespace does not exist yet for the
			// objects in it; the real apply creates it first.
			if dryRun && apierrors.IsNotFound(err) && o.GetNamespace() != "" {
				continue
			}
			c.t.Fatalf("apply %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
}

func (c *cluster) get(ctx context.Context, o *unstructured.Unstructured) (*unstructured.Unstructured, error) {
	return c.resource(o).Get(ctx, o.GetName(), metav1.GetOptions{})
}

// TestKustomizeInstall installs the base on a real API server with a
// server-side dry run and then for real, upgrades it by applying the next
// version over it, and uninstalls it; then the VM overlay. With kubectl on
// PATH (or in $KUBE_ASSETS), the documented commands run as written.
func TestKustomizeInstall(t *testing.T) {
	kc := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := newCluster(t, kc)

	v1 := render(t, "kubernetes", "v1.0.0")
	c.apply(ctx, v1, true)
	for _, o := range v1 {
		if _, err := c.get(ctx, o); !apierrors.IsNotFound(err) {
			t.Errorf("dry run stored %s %s (%v)", o.GetKind(), o.GetName(), err)
		}
	}
	c.apply(ctx, v1, false)
	deploy := func() *unstructured.Unstructured {
		t.Helper()
		d, err := kc.Client.AppsV1().Deployments("meshdns-system").Get(ctx, "meshdns-controlplane", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		u.Object = map[string]any{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": map[string]any{"name": d.Name}}
		u.Object["spec"] = map[string]any{"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{
			"name": d.Spec.Template.Spec.Containers[0].Name, "image": d.Spec.Template.Spec.Containers[0].Image,
			"env": envOf(d.Spec.Template.Spec.Containers[0].Env)}}}}}
		return u
	}
	if diff := cmp.Diff(map[string][]string{repo + ":v1.0.0": {"Deployment/meshdns-controlplane controlplane", "Deployment/meshdns-controlplane MESHDNS_INJECT_IMAGE"}},
		images(t, []*unstructured.Unstructured{deploy()})); diff != "" {
		t.Errorf("installed images (-want +got):\n%s", diff)
	}
	hook, err := kc.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "meshdns-sidecar-injector", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The control plane patches the caBundle at start-up (selfcert); an
	// upgrade must not take it away again.
	hook.Webhooks[0].ClientConfig.CABundle = []byte("-----BEGIN CERTIFICATE-----\nstand-in\n-----END CERTIFICATE-----\n")
	if _, err := kc.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Update(ctx, hook, metav1.UpdateOptions{FieldManager: "meshdns-controlplane"}); err != nil {
		t.Fatal(err)
	}

	// Upgrade: the next version applied over the installed one.
	v2 := render(t, "kubernetes", "v1.1.0")
	c.apply(ctx, v2, true)
	c.apply(ctx, v2, false)
	if diff := cmp.Diff(map[string][]string{repo + ":v1.1.0": {"Deployment/meshdns-controlplane controlplane", "Deployment/meshdns-controlplane MESHDNS_INJECT_IMAGE"}},
		images(t, []*unstructured.Unstructured{deploy()})); diff != "" {
		t.Errorf("upgraded images (-want +got):\n%s", diff)
	}
	hook, err = kc.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "meshdns-sidecar-injector", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(hook.Webhooks[0].ClientConfig.CABundle) == 0 {
		t.Errorf("the upgrade emptied the caBundle the control plane wrote")
	}

	// Uninstall: the webhook configuration first (no new pod is sent to a
	// control plane on its way out), then the rest in reverse order.
	uninstall := slices.Clone(v2)
	slices.Reverse(uninstall)
	for _, o := range uninstall {
		if err := c.resource(o).Delete(ctx, o.GetName(), metav1.DeleteOptions{}); err != nil {
			t.Fatalf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	for _, o := range v2 {
		got, err := c.get(ctx, o)
		// No namespace controller runs beside this API server: the
		// namespace stays Terminating, the rest is gone.
		if o.GetKind() == "Namespace" && err == nil && got.GetDeletionTimestamp() != nil {
			continue
		}
		if err == nil && got.GetDeletionTimestamp() != nil {
			// A CRD goes after the API server's own cleanup of its
			// objects (a finalizer): wait for that, not a fixed time.
			testenv.Eventually(t, o.GetKind()+" "+o.GetName()+" gone", time.Minute, func() bool {
				_, err = c.get(ctx, o)
				return apierrors.IsNotFound(err)
			})
		}
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s %s still there after uninstall (%v)", o.GetKind(), o.GetName(), err)
		}
	}

	t.Run("vm overlay", func(t *testing.T) {
		objs := render(t, "overlays/vm", "")
		// The namespace is Terminating from the uninstall above; the
		// overlay goes into a fresh cluster's worth of names instead.
		for _, o := range objs {
			if o.GetNamespace() == "meshdns-system" {
				o.SetNamespace("meshdns-vm")
			}
			if o.GetKind() == "Namespace" {
				o.SetName("meshdns-vm")
			}
		}
		c.apply(ctx, objs, true)
		c.apply(ctx, objs, false)
		svc, err := kc.Client.CoreV1().Services("meshdns-vm").Get(ctx, "meshdns-controlplane-vm", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if svc.Spec.Type != "LoadBalancer" || svc.Spec.Ports[0].Port != 15012 {
			t.Errorf("VM service %v %v", svc.Spec.Type, svc.Spec.Ports)
		}
	})

	t.Run("cni overlay", func(t *testing.T) {
		objs := render(t, "overlays/cni", "")
		for _, o := range objs {
			if o.GetNamespace() == "meshdns-system" {
				o.SetNamespace("meshdns-cnitest")
			}
			if o.GetKind() == "Namespace" && o.GetName() == "meshdns-system" {
				o.SetName("meshdns-cnitest")
			}
		}
		c.apply(ctx, objs, true)
		c.apply(ctx, objs, false)
		ds, err := kc.Client.AppsV1().DaemonSets("meshdns-cni").Get(ctx, "meshdns-cni", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := ds.Spec.Template.Spec.Containers[0].Image; got != want(t) {
			t.Errorf("DaemonSet image %q, want the base's %q", got, want(t))
		}
		// Applied over the webhook configuration the VM overlay left (the
		// base's, with its Pod Security expressions): the apply takes them
		// out, as `kubectl apply -k examples/overlays/cni` does over an
		// installed base.
		hook, err := kc.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "meshdns-sidecar-injector", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(hook.Webhooks) != 2 {
			t.Fatalf("installed webhooks %d, want 2", len(hook.Webhooks))
		}
		for _, w := range hook.Webhooks {
			if w.NamespaceSelector == nil {
				t.Fatalf("webhook %s lost its namespaceSelector", w.Name)
			}
			for _, e := range w.NamespaceSelector.MatchExpressions {
				if e.Key == podSecurityLabel {
					t.Errorf("installed webhook %s still leaves out namespaces by %v", w.Name, e)
				}
			}
		}
		cm, err := kc.Client.CoreV1().ConfigMaps("meshdns-cnitest").Get(ctx, "meshdns-inject", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if tmpl, err := webhook.ParseTemplate([]byte(cm.Data["template.yaml"])); err != nil || !tmpl.CNI {
			t.Errorf("installed template: cni %v, err %v; want cni: true", tmpl.CNI, err)
		}

		// Back to the init container mode: the base applied over the
		// overlay restores the exclusion and cni: false.
		base := render(t, "kubernetes", "")
		for _, o := range base {
			if o.GetNamespace() == "meshdns-system" {
				o.SetNamespace("meshdns-cnitest")
			}
			if o.GetKind() == "Namespace" && o.GetName() == "meshdns-system" {
				o.SetName("meshdns-cnitest")
			}
		}
		c.apply(ctx, base, false)
		hook, err = kc.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "meshdns-sidecar-injector", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range hook.Webhooks {
			if !slices.ContainsFunc(w.NamespaceSelector.MatchExpressions, func(e metav1.LabelSelectorRequirement) bool { return e.Key == podSecurityLabel }) {
				t.Errorf("webhook %s: the base applied over the overlay did not restore the Pod Security exclusion", w.Name)
			}
		}
		cm, err = kc.Client.CoreV1().ConfigMaps("meshdns-cnitest").Get(ctx, "meshdns-inject", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if tmpl, err := webhook.ParseTemplate([]byte(cm.Data["template.yaml"])); err != nil || tmpl.CNI {
			t.Errorf("template after the base: cni %v, err %v; want cni: false", tmpl.CNI, err)
		}
	})

	t.Run("kubectl", func(t *testing.T) {
		kubectl := kubectlPath()
		if kubectl == "" {
			t.Skip("no kubectl on PATH or in $KUBE_ASSETS; the server-side applies above cover the install")
		}
		run := func(args ...string) string {
			t.Helper()
			cmd := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kc.Kubeconfig}, args...)...)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("kubectl %q: %v: %s", args, err, out)
			}
			return string(out)
		}
		// The install of the README, into a renamed namespace (the first
		// is Terminating): kubectl reads the kustomization itself.
		dir := t.TempDir()
		for _, f := range append(manifestFiles(t), "kustomization.yaml") {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			data = bytes.ReplaceAll(data, []byte("meshdns-system"), []byte("meshdns-kubectl"))
			if err := os.WriteFile(filepath.Join(dir, f), data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		out := run("apply", "-k", dir)
		// Cluster-scoped objects are left from the VM overlay above
		// (configured, not created).
		for _, want := range []string{"namespace/meshdns-kubectl created", "deployment.apps/meshdns-controlplane created",
			"mutatingwebhookconfiguration.admissionregistration.k8s.io/meshdns-sidecar-injector"} {
			if !strings.Contains(out, want) {
				t.Errorf("kubectl apply -k output lacks %q:\n%s", want, out)
			}
		}
		// What an upgrade previews: a server-side dry run over the install.
		if out := run("apply", "-k", dir, "--dry-run=server"); !strings.Contains(out, "deployment.apps/meshdns-controlplane") || !strings.Contains(out, "(server dry run)") {
			t.Errorf("dry run over the install:\n%s", out)
		}
		if img := run("-n", "meshdns-kubectl", "get", "deploy", "meshdns-controlplane", "-o", "jsonpath={.spec.template.spec.containers[0].image}"); !strings.HasPrefix(img, repo+":") || strings.HasSuffix(img, ":latest") {
			t.Errorf("installed image %q, want the kustomization's version", img)
		}
		run("delete", "-k", dir, "--wait=false")

		// kubectl's own kustomize builds the CNI overlay (its JSON patch's
		// test operations included) as the library does.
		out = run("kustomize", "../overlays/cni")
		if !strings.Contains(out, "\n    cni: true\n") || strings.Contains(out, "key: "+podSecurityLabel) {
			t.Errorf("kubectl kustomize overlays/cni: want cni: true and no Pod Security expression:\n%s", out)
		}
	})
}

func envOf(env []corev1.EnvVar) []any {
	var out []any
	for _, e := range env {
		out = append(out, map[string]any{"name": e.Name, "value": e.Value})
	}
	return out
}

func kubectlPath() string {
	if p, err := exec.LookPath("kubectl"); err == nil {
		return p
	}
	if p := filepath.Join(os.Getenv("KUBE_ASSETS"), "kubectl"); os.Getenv("KUBE_ASSETS") != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}
