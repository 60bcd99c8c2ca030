package kubesource

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

// TestRBAC runs the source as a service account that holds exactly the
// README's rules, on an API server with RBAC on: they must be enough, and
// without them the source must not report the zone.
func TestRBAC(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a second API server (RBAC)")
	}
	c := kubetest.Start(t, kubetest.WithRBAC())
	ns := c.Namespace(t, "rbac")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, clusterIPService(ns, "web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const user = "system:serviceaccount:meshdns:controlplane"
	asUser := rest.CopyConfig(c.Config)
	asUser.Impersonate = rest.ImpersonationConfig{UserName: user}
	client, err := NewClientForConfig(asUser) // the production client
	if err != nil {
		t.Fatal(err)
	}

	// Without a role: the lists are forbidden, the informers never sync.
	// Once both lists have been refused, nothing else can make them sync.
	spy := spyOn(client)
	denied := newSource(t, Config{Client: spy})
	rec := run(t, denied)
	spy.awaitLists(t, 30*time.Second, apierrors.IsForbidden, "services", "endpointslices")
	if n := rec.count(); n != 0 {
		t.Fatalf("%d snapshots without permission to list, want 0", n)
	}
	if got := testutil.ToFloat64(denied.m.synced); got != 0 {
		t.Errorf("synced gauge = %v without permission to list, want 0", got)
	}

	// The README's rules.
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "meshdns-kubesource-test"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "meshdns-kubesource-test"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	allowed := newSource(t, Config{Client: client})
	rec = run(t, allowed)
	rec.wait(t, "a snapshot with web, as the service account", func(s registry.Snapshot) bool {
		_, ok := find(s, "web."+ns+".svc.cluster.local")
		return ok && len(s.Zones) == 1
	})
}
