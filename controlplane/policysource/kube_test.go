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
	"sigs.k8s.io/yaml"
)

func readYAML(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return yamlObject(t, string(data))
}

func yamlObject(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestFromAPIServer: objects as a real API server stores and serves them
// (defaults filled in by the CRD's schema) validate here, and an object
// the schema lets through but the control plane refuses (the same pattern
// in another case) is refused with a message naming the rules.
func TestFromAPIServer(t *testing.T) {
	_, dyn := withCRD(t)
	c := cluster.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := c.Namespace(t, "policy")
	ri := dyn.Resource(Resource).Namespace(ns)
	create := func(u *unstructured.Unstructured) *unstructured.Unstructured {
		t.Helper()
		got, err := ri.Create(ctx, u, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create %s: %v", u.GetName(), err)
		}
		return got
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
