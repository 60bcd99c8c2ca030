package kubetest

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
)

// TestInstallCRD: the install's DNSPolicy CRD is served once InstallCRD
// returns (an object is created at once, no retry), and installing it
// again is no error.
func TestInstallCRD(t *testing.T) {
	c := cluster.Get(t)
	const path = "../../../examples/kubernetes/15-dnspolicy-crd.yaml"
	gvr := c.InstallCRD(t, path)
	if diff := cmp.Diff(schema.GroupVersionResource{Group: "meshdns.io", Version: "v1alpha1", Resource: "dnspolicies"}, gvr); diff != "" {
		t.Errorf("resource (-want +got):\n%s", diff)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns := c.Namespace(t, "crd")
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "meshdns.io/v1alpha1", "kind": "DNSPolicy",
		"metadata": map[string]any{"name": "p"},
		"spec":     map[string]any{"podSelector": map[string]any{}, "rules": []any{map[string]any{"pattern": "a.example", "action": "Deny"}}},
	}}
	if _, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Errorf("create a DNSPolicy right after InstallCRD: %v", err)
	}
	if again := c.InstallCRD(t, path); again != gvr {
		t.Errorf("second install: %v, want %v", again, gvr)
	}
}

func TestCRDResourceRejects(t *testing.T) {
	for _, tt := range []struct {
		name string
		obj  map[string]any
	}{
		{name: "not a CRD", obj: map[string]any{"kind": "ConfigMap"}},
		{name: "no storage version", obj: map[string]any{"kind": "CustomResourceDefinition",
			"spec": map[string]any{"group": "a.example", "names": map[string]any{"plural": "things"}, "versions": []any{map[string]any{"name": "v1", "storage": false}}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if gvr, err := crdResource(&unstructured.Unstructured{Object: tt.obj}); err == nil {
				t.Errorf("crdResource = %v, want an error", gvr)
			}
		})
	}
}
