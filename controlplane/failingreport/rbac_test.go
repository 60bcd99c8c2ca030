package failingreport

import (
	"bytes"
	"context"
	"io"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/internal/kubetest"
	"github.com/meshdns/meshdns/internal/testenv"
)

// namespaceRules returns the rules of the install's ClusterRole that name
// namespaces.
func namespaceRules(t *testing.T) []rbacv1.PolicyRule {
	t.Helper()
	data, err := os.ReadFile("../../examples/kubernetes/10-rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var role rbacv1.ClusterRole
		if err := dec.Decode(&role); err == io.EOF {
			t.Fatal("no ClusterRole in 10-rbac.yaml")
		} else if err != nil {
			t.Fatal(err)
		}
		if role.Kind != "ClusterRole" {
			continue
		}
		var out []rbacv1.PolicyRule
		for _, r := range role.Rules {
			if slices.Contains(r.Resources, "namespaces") {
				out = append(out, r)
			}
		}
		return out
	}
}

// TestRBAC runs the namespace watch as a user holding only the install's
// rules for namespaces, on an API server with RBAC on: they let it see a
// namespace opt in.
func TestRBAC(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second API server (RBAC)")
	}
	c := kubetest.Start(t, kubetest.WithRBAC())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const user = "system:serviceaccount:meshdns-system:meshdns-controlplane"
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "meshdns-failingreport-test"}, Rules: namespaceRules(t)}
	if len(role.Rules) != 1 {
		t.Fatalf("install rules for namespaces: %v", role.Rules)
	}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: role.Name},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	asUser := rest.CopyConfig(c.Config)
	asUser.Impersonate = rest.ImpersonationConfig{UserName: user}
	p, err := New(Config{Mode: Namespaces, Kube: asUser})
	if err != nil {
		t.Fatal(err)
	}
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
