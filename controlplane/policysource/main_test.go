package policysource

import (
	"context"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

// cluster is one real etcd + kube-apiserver for the package's tests,
// started by the first test that needs it.
var cluster = kubetest.NewShared()

func TestMain(m *testing.M) { cluster.Main(m) }

// withCRD returns the shared cluster with the DNSPolicy CRD installed and
// served, and a dynamic client.
func withCRD(t *testing.T) (*kubetest.Cluster, dynamic.Interface) {
	t.Helper()
	c := cluster.Get(t)
	c.InstallCRD(t, "../../examples/kubernetes/15-dnspolicy-crd.yaml")
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c, dyn
}

// apply creates or updates a DNSPolicy from YAML in namespace ns.
func apply(t *testing.T, dyn dynamic.Interface, ns, doc string) *unstructured.Unstructured {
	t.Helper()
	u := yamlObject(t, doc)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ri := dyn.Resource(Resource).Namespace(ns)
	got, err := ri.Create(ctx, u, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		old, gerr := ri.Get(ctx, u.GetName(), metav1.GetOptions{})
		if gerr != nil {
			t.Fatal(gerr)
		}
		u.SetResourceVersion(old.GetResourceVersion())
		got, err = ri.Update(ctx, u, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Fatalf("apply %s: %v", u.GetName(), err)
	}
	return got
}
