package kubernetes_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/meshdns/meshdns/controlplane/webhook"
	"github.com/meshdns/meshdns/internal/testkit/kustomizetest"
)

const podSecurityLabel = "pod-security.kubernetes.io/enforce"

// templateOf returns the injection template text of a rendered install.
func templateOf(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	s, _, _ := unstructured.NestedString(kustomizetest.Find(t, objs, "ConfigMap", "meshdns-inject").Object, "data", "template.yaml")
	if s == "" {
		t.Fatal("the ConfigMap meshdns-inject has no template.yaml")
	}
	return s
}

// withoutComments drops comment lines, which the overlay words for CNI mode.
func withoutComments(s string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(strings.TrimSpace(l), "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// selectors returns each webhook entry's namespaceSelector expressions as
// "key operator values".
func selectors(t *testing.T, objs []*unstructured.Unstructured) map[string][]string {
	t.Helper()
	hooks, _, _ := unstructured.NestedSlice(kustomizetest.Find(t, objs, "MutatingWebhookConfiguration", "meshdns-sidecar-injector").Object, "webhooks")
	out := map[string][]string{}
	for _, h := range hooks {
		h := h.(map[string]any)
		exprs, _, _ := unstructured.NestedSlice(h, "namespaceSelector", "matchExpressions")
		var got []string
		for _, e := range exprs {
			e := e.(map[string]any)
			got = append(got, fmt.Sprint(e["key"], " ", e["operator"], " ", e["values"]))
		}
		out[h["name"].(string)] = got
	}
	return out
}

// TestKustomizeCNIOverlay: examples/overlays/cni is the whole CNI install.
// Against the base it turns the template to cni: true (and changes nothing
// else in it), takes exactly the two Pod Security expressions out of the
// webhook's selectors, and adds the DaemonSet's objects; every other object
// is the base's.
func TestKustomizeCNIOverlay(t *testing.T) {
	base, overlay := render(t, "kubernetes", ""), render(t, "overlays/cni", "")

	bt, ot := templateOf(t, base), templateOf(t, overlay)
	if !strings.Contains(bt, "\ncni: false\n") {
		t.Fatalf("the base template does not say cni: false:\n%s", bt)
	}
	if diff := cmp.Diff(strings.Replace(withoutComments(bt), "\ncni: false\n", "\ncni: true\n", 1), withoutComments(ot)); diff != "" {
		t.Errorf("overlays/cni/inject-template.yaml is not the base template with cni: true; change both (-want +got):\n%s", diff)
	}
	for name, text := range map[string]string{"base": bt, "overlay": ot} {
		tmpl, err := webhook.ParseTemplate([]byte(text))
		if err != nil {
			t.Fatalf("%s template: %v", name, err)
		}
		if tmpl.CNI != (name == "overlay") {
			t.Errorf("%s template: cni %v", name, tmpl.CNI)
		}
	}

	want := selectors(t, base)
	for name, exprs := range want {
		n := len(exprs)
		want[name] = slices.DeleteFunc(exprs, func(e string) bool { return strings.HasPrefix(e, podSecurityLabel+" ") })
		if len(want[name]) != n-1 {
			t.Fatalf("base webhook %s: %d Pod Security expressions, want 1: %v", name, n-len(want[name]), exprs)
		}
	}
	if diff := cmp.Diff(want, selectors(t, overlay), cmpopts.EquateEmpty()); diff != "" {
		t.Errorf("overlay webhook selectors (-want +got):\n%s", diff)
	}

	// Everything else: the base's objects unchanged, plus the DaemonSet's.
	key := func(o *unstructured.Unstructured) string {
		return o.GetKind() + "/" + o.GetNamespace() + "/" + o.GetName()
	}
	byKey := map[string]*unstructured.Unstructured{}
	for _, o := range overlay {
		byKey[key(o)] = o
	}
	for _, b := range base {
		o, ok := byKey[key(b)]
		if !ok {
			t.Errorf("the overlay lacks %s", key(b))
			continue
		}
		delete(byKey, key(b))
		if b.GetKind() == "ConfigMap" || b.GetKind() == "MutatingWebhookConfiguration" {
			continue // compared above
		}
		if diff := cmp.Diff(b.Object, o.Object); diff != "" {
			t.Errorf("the overlay changes %s (-base +overlay):\n%s", key(b), diff)
		}
	}
	var added []string
	for k := range byKey {
		added = append(added, k)
	}
	slices.Sort(added)
	if diff := cmp.Diff([]string{"ClusterRole//meshdns-cni", "ClusterRoleBinding//meshdns-cni", "DaemonSet/meshdns-cni/meshdns-cni",
		"Namespace//meshdns-cni", "Role/meshdns-cni/meshdns-cni", "RoleBinding/meshdns-cni/meshdns-cni", "ServiceAccount/meshdns-cni/meshdns-cni"}, added); diff != "" {
		t.Errorf("objects the overlay adds (-want +got):\n%s", diff)
	}
}
