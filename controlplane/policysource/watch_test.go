package policysource

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

// sink records the snapshots a source sends.
type sink struct {
	mu    sync.Mutex
	names []string
	got   chan struct{} // closed at the first update
	once  sync.Once
}

func newSink() *sink { return &sink{got: make(chan struct{})} }

func (s *sink) Update(source string, _ registry.Snapshot) {
	s.mu.Lock()
	s.names = append(s.names, source)
	s.mu.Unlock()
	s.once.Do(func() { close(s.got) })
}

// eventually waits, event by event, until cond holds or ctx ends.
func eventually(t *testing.T, ctx context.Context, s *Store, what string, cond func() string) {
	t.Helper()
	for {
		ch := s.Changed()
		got := cond()
		if got == "" {
			return
		}
		select {
		case <-ch:
		case <-ctx.Done():
			t.Fatalf("%s: %s", what, got)
		}
	}
}

// policyOf describes what Fill gives the pod: its policy's Source and
// rule count.
func policyOf(s *Store, ns, pod string) string {
	src, req := fill(s, ns, pod)
	if src == "" {
		return "none"
	}
	return fmt.Sprintf("%s requires %v", src, req)
}

func expect(s *Store, ns, pod, want string) func() string {
	return func() string {
		if got := policyOf(s, ns, pod); got != want {
			return fmt.Sprintf("pod %s/%s has %q, want %q", ns, pod, got, want)
		}
		return ""
	}
}

// waitStatus waits until the object's Accepted condition has status
// want and returns the condition.
func waitStatus(t *testing.T, ctx context.Context, dyn dynamic.Interface, ns, name string, gen int64, want string) map[string]any {
	t.Helper()
	for {
		u, err := dyn.Resource(Resource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			if m := c.(map[string]any); m["type"] == ConditionAccepted && m["status"] == want && m["observedGeneration"] == gen {
				return m
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("DNSPolicy %s/%s: no Accepted=%s condition for generation %d: %v", ns, name, want, gen, u.Object["status"])
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func createPod(t *testing.T, ctx context.Context, c *kubetest.Cluster, ns, name string, l map[string]string) {
	t.Helper()
	_, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
}

func relabel(t *testing.T, ctx context.Context, c *kubetest.Cluster, ns, name string, l map[string]string) {
	t.Helper()
	p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Labels = l
	if _, err := c.Client.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestKube: policies created, updated, relabelled into and out of, and
// deleted on a real API server reach exactly the pods they select; an
// object the schema accepts but the control plane refuses gets
// Accepted=False and reaches nobody.
func TestKube(t *testing.T) {
	c, dyn := withCRD(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := c.Namespace(t, "shop")
	other := c.Namespace(t, "other")
	createPod(t, ctx, c, ns, "checkout", map[string]string{"app": "checkout"})
	createPod(t, ctx, c, ns, "web", map[string]string{"app": "web"})
	createPod(t, ctx, c, other, "checkout", map[string]string{"app": "checkout"})

	store := NewStore()
	src, err := NewKube(KubeConfig{Config: c.Config, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	sk := newSink()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(rctx, sk) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-sk.got:
	case <-ctx.Done():
		t.Fatal("no snapshot after the first list")
	}

	selector := func(rules string) string {
		return "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: checkout}\n" +
			"spec: {podSelector: {matchLabels: {app: checkout}}, outsideDefault: Deny, rules: [" + rules + "]}"
	}
	u := apply(t, dyn, ns, selector("{pattern: api.stripe.com, action: Allow}"))
	req := " requires [policy]"
	eventually(t, ctx, store, "created", expect(store, ns, "checkout", ns+"/checkout"+req))
	if got := policyOf(store, ns, "web"); got != "none" {
		t.Errorf("pod outside the selector has %q", got)
	}
	if got := policyOf(store, other, "checkout"); got != "none" {
		t.Errorf("pod of another namespace has %q", got)
	}
	waitStatus(t, ctx, dyn, ns, "checkout", u.GetGeneration(), "True")
	if l, _ := store.LabelNamespaces(); !slices.Contains(l, ns) || slices.Contains(l, other) {
		t.Errorf("pod labels watched in %v, want %s and not %s", l, ns, other)
	}

	t.Run("update", func(t *testing.T) {
		u := apply(t, dyn, ns, selector("{pattern: api.stripe.com, action: Allow}, {pattern: '*.s3.amazonaws.com', action: Allow}"))
		eventually(t, ctx, store, "updated", func() string {
			var n int
			if st := fillSettings(store, ns, "checkout"); st != nil {
				n = len(st.Rules)
			}
			if n != 2 {
				return fmt.Sprintf("%d rules", n)
			}
			return ""
		})
		got := waitStatus(t, ctx, dyn, ns, "checkout", u.GetGeneration(), "True")
		if got["reason"] != "Accepted" {
			t.Errorf("condition %v", got)
		}
	})

	t.Run("relabel", func(t *testing.T) {
		relabel(t, ctx, c, ns, "web", map[string]string{"app": "checkout"})
		eventually(t, ctx, store, "relabelled in", expect(store, ns, "web", ns+"/checkout"+req))
		relabel(t, ctx, c, ns, "checkout", map[string]string{"app": "gone"})
		eventually(t, ctx, store, "relabelled out", expect(store, ns, "checkout", "none"))
	})

	t.Run("invalid", func(t *testing.T) {
		bad := apply(t, dyn, ns, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: bad}\n"+
			"spec: {rules: [{pattern: a.example, action: Allow}, {pattern: A.Example., action: Deny}]}")
		got := waitStatus(t, ctx, dyn, ns, "bad", bad.GetGeneration(), "False")
		if got["reason"] != "Invalid" {
			t.Errorf("condition %v", got)
		}
		// The store is told before the status is written; the object
		// selects every pod, and none has it.
		for _, pod := range []string{"checkout", "web"} {
			if got := policyOf(store, ns, pod); got != "none" && got != ns+"/checkout"+req {
				t.Errorf("pod %s has %q", pod, got)
			}
		}
		// Fixed, it is accepted and served.
		fixed := apply(t, dyn, ns, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: bad}\n"+
			"spec: {rules: [{pattern: a.example, action: Deny}]}")
		eventually(t, ctx, store, "fixed", expect(store, ns, "checkout", ns+"/bad"+req))
		waitStatus(t, ctx, dyn, ns, "bad", fixed.GetGeneration(), "True")

		// An edit that breaks a served policy keeps its last valid
		// generation in force (the pod web has two rules of it).
		served := fillSettings(store, ns, "web")
		broken := apply(t, dyn, ns, selector("{pattern: a.example, action: Allow}, {pattern: A.EXAMPLE, action: Allow}"))
		got = waitStatus(t, ctx, dyn, ns, "checkout", broken.GetGeneration(), "False")
		if msg, _ := got["message"].(string); !strings.Contains(msg, fmt.Sprintf("generation %d is still served", broken.GetGeneration()-1)) ||
			!strings.Contains(msg, "is a duplicate of") {
			t.Errorf("condition of a broken edit: %v", got)
		}
		if diff := cmp.Diff(served, fillSettings(store, ns, "web"), protocmp.Transform()); diff != "" {
			t.Errorf("a broken edit changed what the pod is served (-before +after):\n%s", diff)
		}
	})

	t.Run("delete", func(t *testing.T) {
		for _, name := range []string{"bad", "checkout"} {
			if err := dyn.Resource(Resource).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, ctx, store, "deleted", expect(store, ns, "web", "none"))
		if l, _ := store.LabelNamespaces(); slices.Contains(l, ns) {
			t.Errorf("pod labels still watched in %v", l)
		}
	})
}
