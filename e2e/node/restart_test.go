package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/webhook"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// testSidecarRestart kills the sidecar's processes, as an OOM kill or a
// crash would, while the application resolves a name every 20 ms. First
// the agent under the sidecar's supervisor: the supervisor starts another
// agent on the same sockets at once, the container is not restarted, and no
// lookup fails or waits for its timeout. Then the whole sidecar (the
// supervisor): the kubelet restarts it, the restarted agent restores its
// table from the state volume, and lookups succeed again; those failing
// meanwhile are counted and reported.
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
	first := e.firstAfter(t, ns, pod, name, time.Time{}, ok)

	agent := func() (corev1.ContainerStatus, *corev1.Pod) {
		p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range p.Status.InitContainerStatuses {
			if s.Name == webhook.AgentContainerName {
				return s, p
			}
		}
		t.Fatalf("no %s status in %+v", webhook.AgentContainerName, p.Status)
		return corev1.ContainerStatus{}, nil
	}
	restoredFromState := func(p *corev1.Pod, after string) {
		t.Helper()
		r, err := http.Get("http://" + p.Status.PodIP + ":15121/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(r.Body)
		r.Body.Close()
		if !strings.Contains(string(body), `meshdns_agent_table_updates_total{source="state"} 1`) {
			t.Errorf("%s: the agent did not restore the persisted table; its table updates:\n%s", after, grep(string(body), "meshdns_agent_table_updates_total"))
		}
	}

	// The agent under its supervisor. The supervisor restarts an agent
	// that ran 10 s or more at once (a crash loop backs off), so the kill
	// comes after that.
	before, pp := agent()
	supervisor, child := sidecarProcesses(t, e, before.ContainerID)
	if child == 0 {
		t.Fatal("the sidecar's supervisor runs no agent")
	}
	limit := pp.Spec.InitContainers[slices.IndexFunc(pp.Spec.InitContainers, func(c corev1.Container) bool {
		return c.Name == webhook.AgentContainerName
	})].Resources.Limits.Memory().Value()
	if got := procEnv(t, child, "GOMEMLIMIT"); got != strconv.FormatInt(limit, 10) {
		t.Errorf("supervised agent (pid %d): GOMEMLIMIT=%q, want the container's memory limit %d", child, got, limit)
	}
	t.Logf("sidecar processes: supervisor %s; agent %s", procMemory(t, supervisor), procMemory(t, child))
	// Two kills: the first of an agent that ran over 10 s (restarted at
	// once), the second of its successor a second later (a crash loop: the
	// supervisor waits 100 ms first, so a lookup surely waits in the
	// sockets meanwhile).
	time.Sleep(time.Until(first.Add(11 * time.Second)))
	kill := func() (at time.Time, seen time.Duration) {
		t.Helper()
		_, old := sidecarProcesses(t, e, before.ContainerID)
		if old == 0 {
			t.Fatal("the sidecar's supervisor runs no agent")
		}
		at = time.Now()
		if err := syscall.Kill(old, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		testenv.Eventually(t, "the supervisor starting another agent", 10*time.Second, func() bool {
			s, n := sidecarProcesses(t, e, before.ContainerID)
			return s == supervisor && n != 0 && n != old
		})
		return at, time.Since(at)
	}
	t1, seen1 := kill()
	time.Sleep(time.Second)
	t2, seen2 := kill()
	// Every lookup that ended after the first kill, up to 4 s after the
	// second (the application's timeout is 3 s: a lookup a kill stranded
	// would end in it), must have succeeded, and none may have waited
	// long: the queries sent while no agent ran waited in the supervisor's
	// sockets.
	end := t2.Add(4 * time.Second)
	e.firstAfter(t, ns, pod, name, end, ok)
	failed, total, prev := 0, 0, time.Time{}
	var stall1, stall2 time.Duration
	for _, r := range e.results(ns, pod) {
		if r.name != name || r.at.After(end) {
			continue
		}
		if r.at.After(t1) {
			total++
			if !ok(r.out) {
				failed++
				t.Errorf("lookup after the agent's kill: %s", r.out)
			}
			// Each lookup starts 20 ms after the previous one ended.
			took := r.at.Sub(prev) - 20*time.Millisecond
			if r.at.Before(t2) {
				stall1 = max(stall1, took)
			} else {
				stall2 = max(stall2, took)
			}
		}
		prev = r.at
	}
	if total < 50 {
		t.Errorf("only %d lookups after the agent's kills", total)
	}
	if max(stall1, stall2) > time.Second {
		t.Errorf("a lookup took %v / %v across the agent's kills, want under 1s", stall1.Round(time.Millisecond), stall2.Round(time.Millisecond))
	}
	if stall2 < 50*time.Millisecond {
		t.Errorf("across the second kill (a 100 ms restart delay) the longest lookup took %v: no lookup waited for the new agent, the test proves nothing", stall2.Round(time.Millisecond))
	}
	after, pp := agent()
	if after.RestartCount != before.RestartCount {
		t.Errorf("the sidecar container restarted (%d -> %d): the supervisor should have restarted the agent", before.RestartCount, after.RestartCount)
	}
	t.Logf("agent killed twice under its supervisor: %d of %d lookups failed; the longest took %v after the first kill (new agent seen after %v), %v after the second (restart delayed 100 ms, seen after %v)",
		failed, total, stall1.Round(time.Millisecond), seen1.Round(time.Millisecond), stall2.Round(time.Millisecond), seen2.Round(time.Millisecond))
	testenv.Eventually(t, "the new agent ready", 10*time.Second, func() bool {
		s, _ := agent()
		return s.Ready
	})
	restoredFromState(pp, "agent restarted by the supervisor")

	// The whole sidecar, supervisor included: the kubelet restarts it.
	before = after
	t0 := time.Now()
	if err := e.n.KillContainer(before.ContainerID); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the kubelet restarting the sidecar", time.Minute, func() bool {
		s, _ := agent()
		return s.RestartCount > before.RestartCount && s.Ready
	})
	back := e.firstAfter(t, ns, pod, name, time.Now(), ok)
	failed, total = 0, 0
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
	_, pp = agent()
	restoredFromState(pp, "sidecar restarted by the kubelet")
	_ = e.c.Client.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{})
}

// sidecarProcesses returns the host PIDs of the sidecar's supervisor (the
// container's first process) and of the agent it runs (0 while none runs).
func sidecarProcesses(t *testing.T, e *env, containerID string) (supervisor, agent int) {
	t.Helper()
	pids, err := e.n.ContainerPIDs(containerID)
	if err != nil {
		t.Fatal(err)
	}
	parent := map[int]int{}
	for _, pid := range pids {
		if pp, err := ppid(pid); err == nil {
			parent[pid] = pp
		}
	}
	for pid, pp := range parent {
		if _, ok := parent[pp]; !ok {
			supervisor = pid
		}
	}
	for pid, pp := range parent {
		if pp == supervisor {
			agent = pid
		}
	}
	if supervisor == 0 {
		t.Fatalf("sidecar processes %v (parents %v): no supervisor", pids, parent)
	}
	return supervisor, agent
}

// ppid reads a process's parent from /proc/<pid>/stat (the fields after
// the command name in parentheses: state, ppid, ...).
func ppid(pid int) (int, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 2 {
		return 0, fmt.Errorf("/proc/%d/stat: %q", pid, b)
	}
	return strconv.Atoi(f[1])
}

// procEnv returns a process's environment variable key.
func procEnv(t *testing.T, pid int, key string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range strings.Split(string(b), "\x00") {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

// procMemory summarizes a process's resident memory from its status.
func procMemory(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && (k == "VmRSS" || k == "RssAnon" || k == "RssFile") {
			out = append(out, k+" "+strings.Join(strings.Fields(v), " "))
		}
	}
	return fmt.Sprintf("pid %d: %s", pid, strings.Join(out, ", "))
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
