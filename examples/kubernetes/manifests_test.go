// Package kubernetes_test validates the example manifests against a real
// kube-apiserver (server-side dry run) and checks the properties the install
// asks of them.
package kubernetes_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// manifestFiles are the *.yaml files here but kustomization.yaml, which
// kustomize reads rather than the API server (kustomize_test.go).
func manifestFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	files = slices.DeleteFunc(files, func(f string) bool { return f == "kustomization.yaml" })
	sort.Strings(files)
	return files
}

// manifests decodes every YAML document of every manifest file here, in
// file order.
func manifests(t *testing.T) []*unstructured.Unstructured {
	t.Helper()
	files := manifestFiles(t)
	var objs []*unstructured.Unstructured
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for i := 0; ; i++ {
			var u unstructured.Unstructured
			if err := dec.Decode(&u.Object); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s document %d: %v", f, i, err)
			}
			if len(u.Object) == 0 {
				continue
			}
			u.SetAnnotations(merge(u.GetAnnotations(), map[string]string{"test.meshdns.io/source": f}))
			objs = append(objs, &u)
		}
	}
	if len(objs) == 0 {
		t.Fatal("no manifests found")
	}
	return objs
}

func merge(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// TestManifestsDryRun sends every manifest to a real API server with
// dryRun=All: schema, defaulting, validation and admission all run, and
// nothing is stored. Namespaces are created for real first, because the
// API server refuses even a dry-run create in a namespace that does not
// exist.
func TestManifestsDryRun(t *testing.T) {
	c := kubetest.Start(t)
	ctx := context.Background()
	// Warnings fail the test: Pod Security admission warns (without
	// rejecting) about a Deployment whose pods the namespace's level would
	// refuse, and deprecated fields warn too.
	warned := &warnings{}
	cfg := rest.CopyConfig(c.Config)
	cfg.WarningHandler = warned
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))

	objs := manifests(t)
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			// With the manifest's labels, so the Pod Security level is enforced.
			ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.GetName(), Labels: o.GetLabels()}}
			if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create namespace %s: %v", o.GetName(), err)
			}
		}
	}
	seen := map[string]bool{}
	for _, o := range objs {
		name := o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
		t.Run(name, func(t *testing.T) {
			gvk := o.GroupVersionKind()
			m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
			if err != nil {
				t.Fatalf("%s: no such resource in the API server: %v", gvk, err)
			}
			var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
			if o.GetNamespace() != "" {
				ri = dyn.Resource(m.Resource).Namespace(o.GetNamespace())
			}
			opts := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}
			got, err := ri.Create(ctx, o, opts)
			if o.GetKind() == "Namespace" {
				// Created above; the dry run must say exactly that.
				if err == nil || !strings.Contains(err.Error(), "already exists") {
					t.Fatalf("dry-run create of existing namespace: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("server-side dry run: %v", err)
			}
			if w := warned.take(); len(w) > 0 {
				t.Errorf("API server warnings: %q", w)
			}
			if got.GetUID() == "" {
				t.Errorf("dry run returned no uid: the server did not process the object")
			}
			// Nothing may be stored.
			if _, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{}); err == nil {
				t.Errorf("dry run stored the object")
			}
		})
		seen[o.GetKind()] = true
	}
	for _, kind := range []string{"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap",
		"Deployment", "PodDisruptionBudget", "Service", "MutatingWebhookConfiguration", "Pod"} {
		if !seen[kind] {
			t.Errorf("no %s among the manifests", kind)
		}
	}
}

// typed converts the manifest of kind/name into out.
func typed(t *testing.T, objs []*unstructured.Unstructured, kind, name string, out any) {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, out, true); err != nil {
				t.Fatalf("%s %s: %v", kind, name, err)
			}
			return
		}
	}
	t.Fatalf("no %s %s among the manifests", kind, name)
}

// TestManifestPolicies pins what the install requires of the manifests, so an
// edit that loosens them fails here even though it still validates.
func TestManifestPolicies(t *testing.T) {
	objs := manifests(t)

	t.Run("least privilege RBAC", func(t *testing.T) {
		var role rbacv1.ClusterRole
		typed(t, objs, "ClusterRole", "meshdns-controlplane", &role)
		want := []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"multicluster.x-k8s.io"}, Resources: []string{"serviceimports"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{""}, Resources: []string{"nodes"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"admissionregistration.k8s.io"}, Resources: []string{"mutatingwebhookconfigurations"},
				ResourceNames: []string{"meshdns-sidecar-injector"}, Verbs: []string{"get", "update"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"meshdns-ca"}, Verbs: []string{"get", "update"}},
			{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
			{APIGroups: []string{"meshdns.io"}, Resources: []string{"dnspolicies"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"meshdns.io"}, Resources: []string{"dnspolicies/status"}, Verbs: []string{"update"}},
			{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
		}
		if diff := cmp.Diff(want, role.Rules); diff != "" {
			t.Errorf("rules (-want +got):\n%s", diff)
		}
		// The Secret of the self-managed certificate: its own namespace,
		// get/update by name; create cannot be limited to a name.
		var nsRole rbacv1.Role
		typed(t, objs, "Role", "meshdns-controlplane", &nsRole)
		wantNS := []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"create"}},
			{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{"meshdns-webhook-certs"}, Verbs: []string{"get", "update"}},
		}
		if diff := cmp.Diff(wantNS, nsRole.Rules); diff != "" || nsRole.Namespace != "meshdns-system" {
			t.Errorf("namespace %q rules (-want +got):\n%s", nsRole.Namespace, diff)
		}
		// meshdns-operator is for people, bound to no account of the
		// install; TestOperatorRole pins what it grants.
		for _, o := range objs {
			if (o.GetKind() == "Role" || o.GetKind() == "ClusterRole") && o.GetName() != "meshdns-controlplane" && o.GetName() != "meshdns-operator" {
				t.Errorf("unexpected extra role %s %s", o.GetKind(), o.GetName())
			}
		}
	})

	t.Run("control plane deployment", func(t *testing.T) {
		var d appsv1.Deployment
		typed(t, objs, "Deployment", "meshdns-controlplane", &d)
		if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
			t.Errorf("replicas = %v, want 2 or more", d.Spec.Replicas)
		}
		c := d.Spec.Template.Spec.Containers[0]
		if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/healthz/ready" {
			t.Errorf("readiness probe = %+v, want GET /healthz/ready", c.ReadinessProbe)
		}
		if c.LivenessProbe == nil {
			t.Errorf("no liveness probe")
		}
		if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("resources = %+v, want cpu and memory requests and a memory limit", c.Resources)
		}
		sc := c.SecurityContext
		if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("container securityContext = %+v", sc)
		}
		if ps := d.Spec.Template.Spec.SecurityContext; ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot {
			t.Errorf("pod securityContext = %+v, want runAsNonRoot", ps)
		}
		args := strings.Join(c.Args, " ")
		for _, f := range []string{"--webhook-addr=:15017", "--webhook-secret=meshdns-system/meshdns-webhook-certs", "--inject-template=",
			"--grpc-addr=:15012", "--grpc-self-signed", "--admin-addr=127.0.0.1:15014", "--probe-addr=:15015"} {
			if !strings.Contains(args, f) {
				t.Errorf("args %q lack %s", args, f)
			}
		}
	})

	t.Run("disruption budget", func(t *testing.T) {
		var pdb policyv1.PodDisruptionBudget
		typed(t, objs, "PodDisruptionBudget", "meshdns-controlplane", &pdb)
		if pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() < 1 {
			t.Errorf("minAvailable = %v, want at least 1", pdb.Spec.MinAvailable)
		}
	})

	t.Run("service ports", func(t *testing.T) {
		var s corev1.Service
		typed(t, objs, "Service", "meshdns-controlplane", &s)
		got := map[string]string{}
		for _, p := range s.Spec.Ports {
			got[p.Name] = p.TargetPort.String()
		}
		// No admin port: the debug endpoints listen on loopback only.
		want := map[string]string{"grpc": "grpc", "https-webhook": "https-webhook", "http-probes": "http-probes"}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("ports (-want +got):\n%s", diff)
		}
		for _, p := range s.Spec.Ports {
			if p.Name == "https-webhook" && p.Port != 443 {
				t.Errorf("webhook port = %d, want 443", p.Port)
			}
		}
	})

	t.Run("webhook configuration", func(t *testing.T) {
		var mwc admissionregistrationv1.MutatingWebhookConfiguration
		typed(t, objs, "MutatingWebhookConfiguration", "meshdns-sidecar-injector", &mwc)
		paths := map[string]bool{}
		for _, w := range mwc.Webhooks {
			if w.FailurePolicy == nil || *w.FailurePolicy != admissionregistrationv1.Ignore {
				t.Errorf("%s: failurePolicy = %v, want Ignore", w.Name, w.FailurePolicy)
			}
			// A review changes nothing: the namespaces' CA ConfigMaps
			// come from a watch.
			if w.SideEffects == nil || *w.SideEffects != admissionregistrationv1.SideEffectClassNone {
				t.Errorf("%s: sideEffects = %v, want None", w.Name, w.SideEffects)
			}
			if diff := cmp.Diff([]string{"v1"}, w.AdmissionReviewVersions); diff != "" {
				t.Errorf("%s: admissionReviewVersions (-want +got):\n%s", w.Name, diff)
			}
			if w.ReinvocationPolicy == nil {
				t.Errorf("%s: no reinvocationPolicy", w.Name)
			}
			if w.NamespaceSelector == nil {
				t.Errorf("%s: no namespace selector", w.Name)
			}
			// A pod's label opt-out must reach the webhook, which refuses
			// it where an enforcing DNS policy selects the pod.
			if w.ObjectSelector != nil {
				t.Errorf("%s: objectSelector %v keeps opted-out pods from the webhook", w.Name, w.ObjectSelector)
			}
			if w.ClientConfig.Service == nil || w.ClientConfig.Service.Path == nil {
				t.Fatalf("%s: no service path", w.Name)
			}
			paths[*w.ClientConfig.Service.Path] = true
		}
		if diff := cmp.Diff(map[string]bool{"/inject": true, "/inject/annotated": true}, paths); diff != "" {
			t.Errorf("paths (-want +got):\n%s", diff)
		}
	})

	t.Run("README lists and applies every file", func(t *testing.T) {
		readme, err := os.ReadFile("README.md")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range manifestFiles(t) {
			if !strings.Contains(string(readme), "`"+f+"`") {
				t.Errorf("README does not describe %s", f)
			}
			if strings.HasSuffix(f, ".yaml") && !strings.Contains(string(readme), "-f "+f) {
				t.Errorf("README never applies %s", f)
			}
		}
	})

	t.Run("sample namespace is labelled", func(t *testing.T) {
		var ns corev1.Namespace
		typed(t, objs, "Namespace", "demo", &ns)
		if ns.Labels["meshdns.io/inject"] != "enabled" {
			t.Errorf("demo labels = %v", ns.Labels)
		}
		var sys corev1.Namespace
		typed(t, objs, "Namespace", "meshdns-system", &sys)
		if sys.Labels["meshdns.io/inject"] != "disabled" {
			t.Errorf("meshdns-system labels = %v, want injection disabled", sys.Labels)
		}
	})
}

// warnings collects the API server's warnings (rest.WarningHandler).
type warnings struct {
	mu   sync.Mutex // guards list
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}
