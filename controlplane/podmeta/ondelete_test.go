package podmeta

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

// deletions records what OnDelete told, and signals each.
type deletions struct {
	mu   sync.Mutex
	got  []string // "namespace/name uid"
	kick chan struct{}
}

func newDeletions() *deletions { return &deletions{kick: make(chan struct{}, 1)} }

func (d *deletions) deleted(ns, name, uid string) {
	d.mu.Lock()
	d.got = append(d.got, ns+"/"+name+" "+uid)
	d.mu.Unlock()
	select {
	case d.kick <- struct{}{}:
	default:
	}
}

func (d *deletions) list() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.got...)
}

// TestOnDelete: on a real API server, OnDelete watches every namespace;
// UID follows a pod, and its deletion is told with the deleted pod's UID.
func TestOnDelete(t *testing.T) {
	c := cluster.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := c.Namespace(t, "gone")
	p, err := New(Config{Config: c.Config})
	if err != nil {
		t.Fatal(err)
	}
	d := newDeletions()
	p.OnDelete(d.deleted)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	web, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		if uid, ok := p.UID(ns, "web"); ok {
			if uid != string(web.UID) {
				t.Fatalf("UID = %s, want %s", uid, web.UID)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the pod never became known: OnDelete did not watch its namespace")
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, "web", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	want := []string{ns + "/web " + string(web.UID)}
	for !cmp.Equal(want, d.list()) {
		select {
		case <-d.kick:
		case <-ctx.Done():
			t.Fatalf("deletions told %v, want %v", d.list(), want)
		}
	}
	if uid, ok := p.UID(ns, "web"); ok {
		t.Errorf("UID of a deleted pod: %s", uid)
	}
}

// TestOnDeleteReplaced: a pod seen again under its name with another UID
// (its deletion missed, as across a relist) is told as the old one's
// deletion; a relabel is not.
func TestOnDeleteReplaced(t *testing.T) {
	p, err := New(Config{Config: &rest.Config{Host: "http://127.0.0.1:1"}})
	if err != nil {
		t.Fatal(err)
	}
	d := newDeletions()
	p.OnDelete(d.deleted)
	p.byWatch[AllNamespaces] = map[string]pod{}
	meta := func(uid string, l map[string]string) *metav1.PartialObjectMetadata {
		return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "web", UID: types.UID(uid), Labels: l}}
	}
	p.set(AllNamespaces, meta("uid-1", nil), false)
	p.set(AllNamespaces, meta("uid-1", map[string]string{"app": "web"}), false)
	p.set(AllNamespaces, meta("uid-2", nil), false)
	p.set(AllNamespaces, meta("uid-2", nil), true)
	if diff := cmp.Diff([]string{"shop/web uid-1", "shop/web uid-2"}, d.list()); diff != "" {
		t.Errorf("deletions (-want +got):\n%s", diff)
	}
}

// TestOnDeleteForbidden: a control plane that may not list pods (the
// VM-facing one) drops OnDelete's watch of every namespace at Run, rather
// than retry it forever; one that may keeps it.
func TestOnDeleteForbidden(t *testing.T) {
	c := kubetest.Start(t, kubetest.WithRBAC())
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name  string
		rules []rbacv1.PolicyRule
		want  []string
	}{
		{name: "no right on pods", rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"services"}, Verbs: []string{"list"}}}},
		{name: "list and watch on pods", rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}}},
			want: []string{AllNamespaces}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			user := strings.ReplaceAll(tc.name, " ", "-")
			p, err := New(Config{Config: c.AsUserWith(t, user, "podmeta-"+user, tc.rules)})
			if err != nil {
				t.Fatal(err)
			}
			p.OnDelete(func(string, string, string) {})
			p.forbiddenDeletions(ctx)
			p.mu.RLock()
			got := p.wantedLocked()
			p.mu.RUnlock()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("watches wanted (-want +got):\n%s", diff)
			}
		})
	}
}
