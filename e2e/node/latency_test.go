package node

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/webhook"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// testStartLatency measures pod start latency (create to Ready) with and
// without injection, p50 of 10 each, and the sidecar's memory as the
// kubelet's cgroup sees it.
func testStartLatency(t *testing.T, e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs := e.c.Client
	measure := func(ns string) (p50 time.Duration, mem []int64) {
		var d []time.Duration
		for i := range 10 {
			name := fmt.Sprintf("start-%d", i)
			p := appPod(name, []string{"web"})
			t0 := time.Now()
			if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			var pod *corev1.Pod
			testenv.Eventually(t, ns+"/"+name+" Ready", time.Minute, func() bool {
				var err error
				pod, err = cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
				return err == nil && podReady(pod)
			})
			d = append(d, time.Since(t0))
			for _, s := range pod.Status.InitContainerStatuses {
				if s.Name == webhook.AgentContainerName {
					m, err := e.n.MemoryUsage(s.ContainerID)
					if err != nil {
						t.Error(err)
					}
					mem = append(mem, m)
				}
			}
			zero := int64(0)
			if err := cs.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
				t.Fatal(err)
			}
		}
		return percentile(d, 50), mem
	}
	plain, _ := measure("plain")
	injected, mem := measure("demo")
	if len(mem) != 10 {
		t.Fatalf("sidecar memory of %d pods, want 10", len(mem))
	}
	var sum int64
	for _, m := range mem {
		sum += m
	}
	t.Logf("pod start, create to Ready, p50 of 10: %v without injection, %v injected (%.2fx); sidecar memory.usage_in_bytes mean %.1f MiB",
		plain.Round(time.Millisecond), injected.Round(time.Millisecond), float64(injected)/float64(plain), float64(sum)/10/(1<<20))
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
