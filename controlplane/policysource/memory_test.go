package policysource

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPodLabelMemory measures what the pod label watch keeps per pod: 1,000
// pods with the labels a Deployment's pods carry, in a namespace whose
// policy selects by label, listed from the real API server. It writes
// 1,000 pods, so it runs only with MESHDNS_KUBE_MEMORY=1.
func TestPodLabelMemory(t *testing.T) {
	if os.Getenv("MESHDNS_KUBE_MEMORY") == "" {
		t.Skip("set MESHDNS_KUBE_MEMORY=1 to write 1,000 pods to the API server")
	}
	const pods = 1000
	c, dyn := withCRD(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ns := c.Namespace(t, "memory")
	var wg sync.WaitGroup
	errs := make(chan error, pods)
	sem := make(chan struct{}, 8)
	for i := range pods {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			_, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("shop-7d9f8c6b5-%05d", i), Labels: map[string]string{
					"app": "shop", "app.kubernetes.io/name": "shop", "app.kubernetes.io/version": "1.4.2",
					"pod-template-hash": "7d9f8c6b5", "team": "payments"}},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "registry.example/shop:1.4.2",
					Env: []corev1.EnvVar{{Name: "A", Value: "a long value the metadata-only watch never sees"}}}}},
			}, metav1.CreateOptions{})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	apply(t, dyn, ns, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: by-label}\n"+
		"spec: {podSelector: {matchLabels: {team: payments}}}")

	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	store := NewStore()
	src, err := NewKube(KubeConfig{Config: c.Config, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	before := heap()
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- src.Run(rctx, newSink()) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	eventually(t, ctx, store, "every pod's labels", func() string {
		store.mu.Lock()
		n := len(store.pods[ns])
		store.mu.Unlock()
		if n < pods {
			// SetPod fires Changed only when a selection changes: the
			// first pods do, the rest arrive in the same list.
			select {
			case <-time.After(50 * time.Millisecond):
			case <-ctx.Done():
			}
			return fmt.Sprintf("%d of %d pods", n, pods)
		}
		return ""
	})
	after := heap()
	t.Logf("pod label watch: %d pods, heap %d KiB more, %d bytes per pod", pods, (after-before)>>10, int64(after-before)/pods)
}
