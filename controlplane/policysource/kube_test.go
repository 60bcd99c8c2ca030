package policysource

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/internal/kubetest"
)

func readYAML(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestFromAPIServer: objects as a real API server stores and serves them
// (defaults filled in by the CRD's schema) validate here, and an object
// the schema lets through but the control plane refuses (the same pattern
// in another case) is refused with a message naming the rules.
func TestFromAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dyn.Resource(crds).Create(ctx, readYAML(t, "../../examples/kubernetes/15-dnspolicy-crd.yaml"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ns := c.Namespace(t, "policy")
	ri := dyn.Resource(schema.GroupVersionResource{Group: "meshdns.io", Version: "v1alpha1", Resource: "dnspolicies"}).Namespace(ns)
	create := func(u *unstructured.Unstructured) *unstructured.Unstructured {
		t.Helper()
		for {
			got, err := ri.Create(ctx, u, metav1.CreateOptions{})
			if err == nil {
				return got
			}
			// The resource is served a moment after the CRD is created.
			if !strings.Contains(err.Error(), "the server could not find the requested resource") {
				t.Fatalf("create %s: %v", u.GetName(), err)
			}
			select {
			case <-ctx.Done():
				t.Fatalf("create %s: %v", u.GetName(), err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}

	example := create(readYAML(t, "../../examples/kubernetes/dnspolicy/allow-stripe.yaml"))
	p, err := FromUnstructured(example)
	if err != nil {
		t.Fatalf("served example: %v", err)
	}
	if p.Namespace != ns || len(p.DNS.Rules) != 2 || !p.Selector.Matches(labels.Set{"app": "checkout"}) {
		t.Errorf("served example: %v", p)
	}

	minimal := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte("apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: twice}\n"+
		"spec: {rules: [{pattern: a.example, action: Allow}, {pattern: A.Example., action: Deny}]}"), &minimal.Object); err != nil {
		t.Fatal(err)
	}
	served := create(minimal)
	if v, _, _ := unstructured.NestedString(served.Object, "spec", "mode"); v != "Enforce" {
		t.Errorf("schema default mode %q", v)
	}
	_, err = FromUnstructured(served)
	if err == nil || !strings.Contains(err.Error(), "spec.rules[1]") || !strings.Contains(err.Error(), "in conflict with spec.rules[0]") {
		t.Errorf("conflicting patterns the schema accepts: %v", err)
	}

	// The condition the control plane would write fits the status schema.
	cond, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ptr(Condition(served.GetGeneration(), err, time.Now())))
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedSlice(served.Object, []any{cond}, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	got, err := ri.UpdateStatus(ctx, served, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("write the Invalid condition: %v", err)
	}
	conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
	if len(conds) != 1 || !strings.Contains(conds[0].(map[string]any)["message"].(string), "in conflict with") {
		t.Errorf("stored conditions %v", conds)
	}
}

func ptr[T any](v T) *T { return &v }
