package node

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/webhook"
	"github.com/meshdns/meshdns/internal/testenv"
)

// testSidecarRestart kills the sidecar's process, as an OOM kill or a crash
// would, while the application resolves a name every 20 ms: the kubelet
// restarts it, the restarted agent restores its table from the state
// volume, and lookups succeed again. Failed lookups during the restart are
// counted and reported.
func testSidecarRestart(t *testing.T, e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns, pod, name = "demo", "restarts", "web"
	p := appPod(pod, []string{name})
	p.Spec.Containers[0].Args = []string{"-every", "20ms", name}
	if _, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ok := func(out string) bool { return strings.HasPrefix(out, "ok ") }
	e.firstAfter(t, ns, pod, name, time.Time{}, ok)

	agent := func() corev1.ContainerStatus {
		p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range p.Status.InitContainerStatuses {
			if s.Name == webhook.AgentContainerName {
				return s
			}
		}
		t.Fatalf("no %s status in %+v", webhook.AgentContainerName, p.Status)
		return corev1.ContainerStatus{}
	}
	before := agent()
	t0 := time.Now()
	if err := e.n.KillContainer(before.ContainerID); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the kubelet restarting the sidecar", time.Minute, func() bool {
		s := agent()
		return s.RestartCount > before.RestartCount && s.Ready
	})
	back := e.firstAfter(t, ns, pod, name, time.Now(), ok)
	failed, total := 0, 0
	for _, r := range e.results(ns, pod) {
		if r.at.After(t0) && r.at.Before(back) {
			total++
			if !ok(r.out) {
				failed++
			}
		}
	}
	t.Logf("sidecar killed: %d of %d lookups failed until the restarted agent answered, %v after the kill",
		failed, total, back.Sub(t0).Round(time.Millisecond))

	// The restarted agent took its table from the state volume.
	pp, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := http.Get("http://" + pp.Status.PodIP + ":15121/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if !strings.Contains(string(body), `meshdns_agent_table_updates_total{source="state"} 1`) {
		t.Errorf("restarted agent did not restore the persisted table; its table updates:\n%s", grep(string(body), "meshdns_agent_table_updates_total"))
	}
	_ = e.c.Client.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{})
}

func grep(s, substr string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// testUninjected runs the application in a namespace without the label: the
// pod is left alone and resolves through the cluster DNS as before.
func testUninjected(t *testing.T, e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns, pod = "plain", "app"
	names := []string{"www.example.org"}
	if _, err := e.c.Client.CoreV1().Pods(ns).Create(ctx, appPod(pod, names), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got, done := e.waitRound(t, ns, pod, names)
	if !done || got["www.example.org"] != "ok "+externalIP {
		t.Fatalf("uninjected pod: %v", got)
	}
	p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Spec.InitContainers) != 0 || p.Annotations[webhook.AnnotationStatus] != "" {
		t.Errorf("pod in an unlabelled namespace was injected: %d init containers, annotations %v", len(p.Spec.InitContainers), p.Annotations)
	}
	_ = e.c.Client.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{})
}
