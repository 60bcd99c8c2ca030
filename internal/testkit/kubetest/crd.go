package kubetest

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// CRDs is the resource of CustomResourceDefinitions.
var CRDs = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRD creates the CustomResourceDefinition in the YAML file at path
// (an install's, or a published one; a field the API server does not know
// fails it), unless the cluster has it already,
// and returns its resource (the storage version) once the API server
// serves it: a moment after the create, when a list of it first succeeds.
func (c *Cluster) InstallCRD(t testing.TB, path string) schema.GroupVersionResource {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &crd.Object); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	gvr, err := crdResource(crd)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := dyn.Resource(CRDs).Create(ctx, crd, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatalf("create CRD %s: %v", crd.GetName(), err)
	}
	testenv.Eventually(t, gvr.Resource+" served", time.Minute, func() bool {
		_, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("list %s: %v", gvr.Resource, err)
		}
		return err == nil
	})
	return gvr
}

// crdResource is the resource a CRD object defines, at its storage
// version.
func crdResource(crd *unstructured.Unstructured) (schema.GroupVersionResource, error) {
	if crd.GetKind() != "CustomResourceDefinition" {
		return schema.GroupVersionResource{}, fmt.Errorf("kind %q, want CustomResourceDefinition", crd.GetKind())
	}
	group, _, _ := unstructured.NestedString(crd.Object, "spec", "group")
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		m, _ := v.(map[string]any)
		if stored, _ := m["storage"].(bool); stored {
			name, _ := m["name"].(string)
			return schema.GroupVersionResource{Group: group, Version: name, Resource: plural}, nil
		}
	}
	return schema.GroupVersionResource{}, fmt.Errorf("CRD %s has no storage version", crd.GetName())
}
