package podmeta

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// recorder keeps the changes a need was told of, and signals each.
type recorder struct {
	mu   sync.Mutex
	got  map[string]labels.Set // "ns/name" -> last labels told; nil: deleted
	kick chan struct{}         // capacity 1
}

func newRecorder() *recorder {
	return &recorder{got: map[string]labels.Set{}, kick: make(chan struct{}, 1)}
}

func (r *recorder) changed(ns, name string, l labels.Set) {
	r.mu.Lock()
	r.got[ns+"/"+name] = l
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// await waits, change by change, until the recorder was told labels
// want (nil: deleted) for pod key.
func (r *recorder) await(t *testing.T, ctx context.Context, key string, want labels.Set) {
	t.Helper()
	for {
		r.mu.Lock()
		l, ok := r.got[key]
		r.mu.Unlock()
		if ok && labels.Equals(l, want) && (l == nil) == (want == nil) {
			return
		}
		select {
		case <-r.kick:
		case <-ctx.Done():
			t.Fatalf("%s: told %v (%v), want %v", key, l, ok, want)
		}
	}
}

// TestPods: on a real API server, two needs share the cache: a
// per-namespace need sees its namespace's pods (and no other), relabels
// and deletions reach it; a need of every namespace makes the other
// namespace's pods known and is synced once listed; dropping it leaves
// the per-namespace need served.
func TestPods(t *testing.T) {
	c := cluster.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	shop, other := c.Namespace(t, "shop"), c.Namespace(t, "other")
	pod := func(ns, name string, l map[string]string) *corev1.Pod {
		t.Helper()
		p, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: l, Annotations: map[string]string{"big": "not kept"}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	web := pod(shop, "web", map[string]string{"app": "web"})
	pod(other, "batch", map[string]string{"app": "batch"})

	p, err := New(Config{Config: c.Config})
	if err != nil {
		t.Fatal(err)
	}
	perNS, all := newRecorder(), newRecorder()
	nsNeed, allNeed := p.Need(perNS.changed), p.Need(all.changed)
	nsNeed.Set([]string{shop})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(rctx) }()
	t.Cleanup(func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	select {
	case <-nsNeed.Synced():
	case <-ctx.Done():
		t.Fatal("the per-namespace need never synced")
	}
	if l, ok := p.Labels(shop, "web"); !ok || l["app"] != "web" {
		t.Errorf("Labels(%s, web) = %v, %v after sync", shop, l, ok)
	}
	if l, ok := p.Labels(other, "batch"); ok {
		t.Errorf("Labels(%s, batch) = %v: a namespace no need names is watched", other, l)
	}
	perNS.await(t, ctx, shop+"/web", labels.Set{"app": "web"})
	select {
	case <-allNeed.Synced():
		t.Error("a need never Set is synced")
	default:
	}

	t.Run("relabel", func(t *testing.T) {
		web.Labels = map[string]string{"app": "checkout"}
		if _, err := c.Client.CoreV1().Pods(shop).Update(ctx, web, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		perNS.await(t, ctx, shop+"/web", labels.Set{"app": "checkout"})
		if l, _ := p.Labels(shop, "web"); l["app"] != "checkout" {
			t.Errorf("Labels after the change was told: %v", l)
		}
	})

	t.Run("every namespace", func(t *testing.T) {
		allNeed.Set([]string{AllNamespaces})
		select {
		case <-allNeed.Synced():
		case <-ctx.Done():
			t.Fatal("the need of every namespace never synced")
		}
		if l, ok := p.Labels(other, "batch"); !ok || !labels.Equals(l, labels.Set{"app": "batch"}) {
			t.Errorf("Labels(%s, batch) = %v, %v with every namespace watched", other, l, ok)
		}
		all.await(t, ctx, other+"/batch", labels.Set{"app": "batch"})
		perNS.mu.Lock()
		_, told := perNS.got[other+"/batch"]
		perNS.mu.Unlock()
		if told {
			t.Error("a pod outside the need's namespaces was told to it")
		}
		// Back to the per-namespace watch: once it has listed, the
		// cluster-wide one stops and the need of shop is still served.
		allNeed.Set(nil)
		for {
			if _, ok := p.Labels(other, "batch"); !ok {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatal("the cluster-wide watch did not stop when no need names every namespace")
			case <-time.After(20 * time.Millisecond):
			}
		}
		if l, ok := p.Labels(shop, "web"); !ok || l["app"] != "checkout" {
			t.Errorf("Labels(%s, web) = %v, %v after the cluster-wide watch stopped", shop, l, ok)
		}
		pod(shop, "late", map[string]string{"app": "late"})
		perNS.await(t, ctx, shop+"/late", labels.Set{"app": "late"})
	})

	t.Run("delete", func(t *testing.T) {
		if err := c.Client.CoreV1().Pods(shop).Delete(ctx, "web", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		perNS.await(t, ctx, shop+"/web", nil)
		if l, ok := p.Labels(shop, "web"); ok {
			t.Errorf("Labels of a deleted pod: %v", l)
		}
	})
}
