package failingreport

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/metadata"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestRBAC runs the namespace watch as a user holding only the install's
// rules for namespaces, on an API server with RBAC on: they let it see a
// namespace opt in.
func TestRBAC(t *testing.T) {
	c, asUser := kubetest.StartAsControlPlane(t, "../../examples/kubernetes/10-rbac.yaml", 1, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.Resources, "namespaces")
	})
	p, err := New(Config{Mode: Namespaces, Kube: asUser})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := p.Run(runCtx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	defer func() { stop(); wg.Wait() }()

	ns := c.Namespace(t, "rbac")
	patch := `{"metadata":{"labels":{"` + Label + `":"` + Enabled + `"}}}`
	if _, err := c.Client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the labelled namespace seen through the install's rules", time.Minute, func() bool {
		return slices.Contains(p.OptedIn(), ns)
	})
	// A list alone would let the reflector find it too, at its next
	// relist: the watch itself must be allowed.
	meta, err := metadata.NewForConfig(asUser)
	if err != nil {
		t.Fatal(err)
	}
	w, err := meta.Resource(namespacesResource).Watch(ctx, metav1.ListOptions{LabelSelector: Label + "=" + Enabled})
	if err != nil {
		t.Fatalf("watch labelled namespaces with the install's rules: %v", err)
	}
	w.Stop()
}
