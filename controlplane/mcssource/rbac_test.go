package mcssource

import (
	"context"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

// recorder is a registry.Sink that keeps every snapshot.
type recorder struct {
	mu    sync.Mutex
	snaps []registry.Snapshot
	kick  chan struct{}
}

func (r *recorder) Update(_ string, s registry.Snapshot) {
	r.mu.Lock()
	r.snaps = append(r.snaps, s)
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// wait returns the first snapshot ok accepts, waiting for new ones.
func (r *recorder) wait(ctx context.Context, t *testing.T, what string, ok func(registry.Snapshot) bool) registry.Snapshot {
	t.Helper()
	seen := 0
	for {
		r.mu.Lock()
		snaps := r.snaps[seen:]
		seen = len(r.snaps)
		r.mu.Unlock()
		for _, s := range snaps {
			if ok(s) {
				return s
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no snapshot with %s", what)
		case <-r.kick:
		}
	}
}

// forbiddenSpy passes a Client through and closes refused when a list of
// ServiceImports was refused.
type forbiddenSpy struct {
	Client
	once    sync.Once
	refused chan struct{}
}

func (s *forbiddenSpy) ServiceImports() cache.ListerWatcher {
	lw := s.Client.ServiceImports()
	return &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			obj, err := lw.List(o)
			if apierrors.IsForbidden(err) {
				s.once.Do(func() { close(s.refused) })
			}
			return obj, err
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) { return lw.Watch(o) },
	}
}

// TestRBAC runs the source as a user holding only the README's rules, on
// an API server with RBAC on and the CRD installed: discovery needs no
// rule, and without the rules the zone is never reported.
func TestRBAC(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an API server (RBAC)")
	}
	c := kubetest.Start(t, kubetest.WithRBAC())
	ns := c.Namespace(t, "rbac")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	c.InstallCRD(t, "testdata/multicluster.x-k8s.io_serviceimports.yaml")
	imp := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": Group + "/" + Version, "kind": "ServiceImport",
		"metadata": map[string]any{"name": "web", "namespace": ns},
		"spec":     map[string]any{"type": "ClusterSetIP", "ips": []any{"10.9.0.1"}, "ports": []any{map[string]any{"name": "http", "port": int64(80)}}},
	}}
	if _, err := dyn.Resource(schema.GroupVersionResource{Group: Group, Version: Version, Resource: Resource}).Namespace(ns).Create(ctx, imp, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create ServiceImport: %v", err)
	}

	const user = "system:serviceaccount:meshdns:controlplane"
	asUser := rest.CopyConfig(c.Config)
	asUser.Impersonate = rest.ImpersonationConfig{UserName: user}
	client, err := NewClientForConfig(asUser)
	if err != nil {
		t.Fatal(err)
	}
	spy := &forbiddenSpy{Client: client, refused: make(chan struct{})}
	src, err := New(Config{Client: spy, Recheck: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{kick: make(chan struct{}, 1)}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(runCtx, rec) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	// Without a role: discovery finds the CRD, the list is refused, and
	// only the first, zoneless snapshot is sent.
	select {
	case <-spy.refused:
	case <-ctx.Done():
		t.Fatal("the ServiceImport list was never refused")
	}
	rec.mu.Lock()
	for _, s := range rec.snaps {
		if len(s.Zones) > 0 || len(s.Entries) > 0 {
			t.Errorf("snapshot %+v without permission to list, want none with a zone or entries", s)
		}
	}
	rec.mu.Unlock()

	// The README's rules: the informers' retries now succeed.
	role := &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "meshdns-mcssource-test"},
		Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{Group}, Resources: []string{Resource}, Verbs: []string{"list", "watch"}},
			{APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}, Verbs: []string{"list", "watch"}},
		},
	}
	if _, err := c.Client.RbacV1().ClusterRoles().Create(ctx, role, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	binding := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "meshdns-mcssource-test"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}
	if _, err := c.Client.RbacV1().ClusterRoleBindings().Create(ctx, binding, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.wait(ctx, t, "the import and the zone, as the user", func(s registry.Snapshot) bool {
		return len(s.Zones) == 1 && s.Zones[0] == "clusterset.local" &&
			len(s.Entries) == 1 && s.Entries[0].Hostname == "web."+ns+".svc.clusterset.local"
	})
}
