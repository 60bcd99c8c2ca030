package node

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/webhook"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// testCARotation rotates the control plane's CA at once, as its README
// says (delete the Secret), under a running injected pod that resolves a
// name every 20 ms, and restarts the control plane so the agent must
// reconnect: the new process makes a new CA, so the agent's first
// handshakes fail until the kubelet refreshes the pod's projected
// meshdns-ca ConfigMap; then the agent, re-reading its CA file, is admitted
// again. No lookup may fail meanwhile (the agent serves its table), and the
// sidecar container is not restarted. The restarted control plane serves
// the parts that follow; parent's cleanup stops it.
func testCARotation(t, parent *testing.T, e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cs := e.c.Client
	const ns, name, pod = "demo", "rotating", "ca-rotation"
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "ok " + svc.Spec.ClusterIP
	isWant := func(out string) bool { return out == want }
	p := appPod(pod, []string{name})
	p.Spec.Containers[0].Args = []string{"-every", "20ms", name}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.firstAfter(t, ns, pod, name, time.Time{}, isWant)
	ip := podIP(t, ctx, e, ns, pod)

	stored, err := cs.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	projected := false
	for _, v := range stored.Spec.Volumes {
		if v.Name == webhook.IdentityVolumeName && v.Projected != nil {
			for _, s := range v.Projected.Sources {
				projected = projected || (s.ConfigMap != nil && s.ConfigMap.Name == webhook.CAConfigMapName)
			}
		}
	}
	if !projected {
		t.Fatalf("the pod's identity volume does not project the %s ConfigMap: %+v", webhook.CAConfigMapName, stored.Spec.Volumes)
	}
	caBefore := caConfigMap(t, ctx, e, ns)
	restarts := agentRestarts(t, ctx, e, ns, pod)
	connectsBefore := agentMetric(t, ip, `meshdns_discovery_connects_total{result="ok"}`)

	// The rotation: the Secret goes, the control plane restarts and makes
	// a new CA at once.
	pid, args := controlPlaneProcess(t, e)
	adminAddr := flagValue(args, "--admin-addr")
	secretNS, secretName, _ := strings.Cut(flagValue(args, "--webhook-secret"), "/")
	t0 := time.Now()
	if err := cs.CoreV1().Secrets(secretNS).Delete(ctx, secretName, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	replaceControlPlane(t, parent, e, pid, "controlplane-rotated", e.meshdns, args)
	testenv.Eventually(t, "the namespace's CA ConfigMap rewritten with the new CA", time.Minute, func() bool {
		return caConfigMap(t, ctx, e, ns) != caBefore
	})
	rewritten := time.Since(t0)
	// The kubelet refreshes the projected file within its sync period
	// (about a minute); the agent retries with backoff meanwhile.
	testenv.Eventually(t, "the running pod's agent admitted by the new control plane", 4*time.Minute, func() bool {
		a := agentOf(t, adminAddr, ns, pod)
		return a.Acked != "" && a.Acked == a.View
	})
	reconnected := time.Since(t0)
	back := e.firstAfter(t, ns, pod, name, time.Now(), isWant)

	failed, total := 0, 0
	for _, r := range e.results(ns, pod) {
		if r.name == name && r.at.After(t0) && !r.at.After(back) {
			total++
			if !isWant(r.out) {
				failed++
			}
		}
	}
	t.Logf("CA rotation: ConfigMap rewritten %v and the agent admitted with the new CA %v after the Secret's deletion; %d of %d lookups failed meanwhile",
		rewritten.Round(time.Millisecond), reconnected.Round(time.Millisecond), failed, total)
	if total == 0 || failed > 0 {
		t.Errorf("lookups during the CA rotation: %d of %d failed", failed, total)
	}
	if r := agentRestarts(t, ctx, e, ns, pod); r != restarts {
		t.Errorf("the sidecar restarted across the rotation: %d restarts, %d before", r, restarts)
	}
	if c := agentMetric(t, ip, `meshdns_discovery_connects_total{result="ok"}`); c <= connectsBefore {
		t.Errorf("the agent did not reconnect: %v streams, %v before", c, connectsBefore)
	}
	_ = cs.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{})
}

func caConfigMap(t *testing.T, ctx context.Context, e *env, ns string) string {
	t.Helper()
	cm, err := e.c.Client.CoreV1().ConfigMaps(ns).Get(ctx, webhook.CAConfigMapName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm.Data["ca.crt"]
}

func agentRestarts(t *testing.T, ctx context.Context, e *env, ns, pod string) int32 {
	t.Helper()
	p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Status.InitContainerStatuses {
		if s.Name == webhook.AgentContainerName {
			return s.RestartCount
		}
	}
	t.Fatalf("no %s status", webhook.AgentContainerName)
	return 0
}
