package kubestack

import (
	"context"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/meshdns/meshdns/controlplane/mcssource"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

// InstallServiceImportCRD installs the ServiceImport CRD of the MCS API
// (its published YAML, in controlplane/mcssource/testdata) on c with
// kubetest's InstallCRD, which returns once it is served, and returns a
// dynamic client and the CRD's name (to delete it).
func InstallServiceImportCRD(t testing.TB, c *kubetest.Cluster) (dynamic.Interface, string) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	_, self, _, _ := runtime.Caller(0)
	c.InstallCRD(t, filepath.Join(filepath.Dir(self), "../../../controlplane/mcssource/testdata/multicluster.x-k8s.io_serviceimports.yaml"))
	return dyn, mcssource.Resource + "." + mcssource.Group
}

// ServiceImport is a ServiceImport in ns of type typ ("ClusterSetIP" or
// "Headless") with ports (spec.ports entries) and, when not empty, ips.
func ServiceImport(ns, name, typ string, ips []string, ports []any) *unstructured.Unstructured {
	spec := map[string]any{"type": typ, "ports": ports}
	if len(ips) > 0 {
		l := make([]any, len(ips))
		for i, ip := range ips {
			l[i] = ip
		}
		spec["ips"] = l
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": mcssource.Group + "/" + mcssource.Version, "kind": "ServiceImport",
		"metadata": map[string]any{"name": name, "namespace": ns}, "spec": spec,
	}}
}

// CreateServiceImport creates u, retrying while the resource is not
// served yet (a CRD takes a moment to be established).
func CreateServiceImport(ctx context.Context, t testing.TB, dyn dynamic.Interface, u *unstructured.Unstructured) {
	t.Helper()
	imports := dyn.Resource(schema.GroupVersionResource{Group: mcssource.Group, Version: mcssource.Version, Resource: mcssource.Resource})
	for {
		_, err := imports.Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{})
		if err == nil {
			return
		}
		if ctx.Err() != nil || !apierrors.IsNotFound(err) {
			t.Fatalf("create ServiceImport %s: %v", u.GetName(), err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
}
