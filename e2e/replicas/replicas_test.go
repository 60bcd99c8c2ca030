package replicas

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/internal/testkit/buildtest"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/loadagent"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// meshdnsBuild is cmd/meshdns, built once for all the tests; TestMain
// removes it.
var meshdnsBuild = &buildtest.Binary{Pkg: "github.com/meshdns/meshdns/cmd/meshdns"}

func TestMain(m *testing.M) {
	code := m.Run()
	meshdnsBuild.Remove()
	os.Exit(code)
}

// buildMeshdns returns the path of cmd/meshdns, built on first use.
func buildMeshdns(t testing.TB) string { return meshdnsBuild.Path(t) }

// replica is one control plane process.
type replica struct {
	grpc, admin string
	cmd         *exec.Cmd
	done        chan struct{}
}

func startReplica(t testing.TB, c *kubetest.Cluster, grpcAddr string) *replica {
	t.Helper()
	r := &replica{grpc: grpcAddr, admin: testenv.FreeAddr(t), done: make(chan struct{})}
	r.cmd = exec.Command(buildMeshdns(t), "controlplane", "--kubeconfig", c.Kubeconfig,
		"--insecure-allow-unauthenticated", // the agents here present no token: the test is about replicas
		"--grpc-addr", r.grpc, "--admin-addr", r.admin, "--debounce", "20ms", "--log-level", "warn")
	r.cmd.Stderr = os.Stderr
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(r.kill)
	testenv.Eventually(t, "replica "+r.grpc+" ready", 60*time.Second, func() bool {
		resp, err := http.Get("http://" + r.admin + "/healthz/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return r
}

// kill ends the replica at once (a crashed or evicted pod); idempotent.
func (r *replica) kill() {
	_ = r.cmd.Process.Kill()
	<-r.done
}

// agent is one lightweight agent and what it got.
type agent struct {
	events chan loadagent.Event
	cancel context.CancelFunc
	done   chan struct{}
}

func startAgent(t testing.TB, cfg loadagent.Config) *agent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	a := &agent{events: make(chan loadagent.Event, 64), cancel: cancel, done: make(chan struct{})}
	cfg.MinBackoff = 50 * time.Millisecond
	cfg.Report = func(e loadagent.Event) {
		select {
		case a.events <- e:
		case <-ctx.Done():
		}
	}
	go func() { defer close(a.done); _ = loadagent.Run(ctx, cfg) }()
	t.Cleanup(a.stop)
	return a
}

func (a *agent) stop() {
	a.cancel()
	<-a.done
}

// next returns the agent's next applied response.
func (a *agent) next(t testing.TB, what string) loadagent.Event {
	t.Helper()
	select {
	case e := <-a.events:
		return e
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: no response within 30s", what)
		return loadagent.Event{}
	}
}

func createService(t testing.TB, c *kubetest.Cluster, ns, name string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	svc, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create service %s: %v", name, err)
	}
	return svc.Spec.ClusterIP
}

// TestAgentsMoveBetweenReplicas: two control plane processes watching one
// API server, without a leader, give the same content the same version; an
// agent that leaves one replica while the cluster changes resumes on the
// other with a delta of only the change; an agent whose replica is killed
// moves to a freshly restarted one with an empty delta.
func TestAgentsMoveBetweenReplicas(t *testing.T) {
	c := kubetest.Start(t)
	ns := c.Namespace(t, "replicas")
	for i := range 5 {
		createService(t, c, ns, fmt.Sprintf("web-%d", i))
	}
	a := startReplica(t, c, testenv.FreeAddr(t))
	b := startReplica(t, c, testenv.FreeAddr(t))
	moved := "moved." + ns + ".svc.cluster.local"

	// One agent on each replica: the same content has the same version.
	onA := startAgent(t, loadagent.Config{Addrs: []string{a.grpc}, Namespace: ns, Pod: "on-a", Watch: moved})
	onB := startAgent(t, loadagent.Config{Addrs: []string{b.grpc}, Namespace: ns, Pod: "on-b", Index: 1, Watch: moved})
	ea, eb := onA.next(t, "agent on A"), onB.next(t, "agent on B")
	if ea.Kind != "full" || eb.Kind != "full" {
		t.Fatalf("first responses: %s from A, %s from B; want full tables", ea.Kind, eb.Kind)
	}
	if ea.Version == "" || ea.Version != eb.Version {
		t.Fatalf("replicas disagree on the version of one content: A %q, B %q", ea.Version, eb.Version)
	}
	v1 := ea.Version

	// The agent of A leaves (its replica is gone), the cluster changes
	// while it is away, and it resumes on B from the version it holds.
	onA.stop()
	a.kill()
	ip := createService(t, c, ns, "moved")
	e := onB.next(t, "agent on B sees the change")
	if e.Kind != "delta" || e.Watched != ip {
		t.Fatalf("agent on B got %s (watched %q), want a delta with moved = %s", e.Kind, e.Watched, ip)
	}
	v2 := e.Version
	// The agent on B is the only one there, so v2's canary: B holds v2
	// back from the other agents of the view until it handled that ACK.
	testenv.Eventually(t, "B released v2 to its other agents", time.Minute, func() bool {
		resp, err := http.Get("http://" + b.admin + "/metrics")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		held, ok := findMetric(resp, "meshdns_controlplane_rollout_held_versions")
		return ok && held == 0
	})
	back := startAgent(t, loadagent.Config{Addrs: []string{b.grpc}, Namespace: ns, Pod: "on-a", Version: v1, Watch: moved})
	e = back.next(t, "agent resuming on B")
	if e.Kind != "delta" || e.Empty || e.Watched != ip || e.Version != v2 {
		t.Fatalf("resume on B from %s: got %s (empty %v, watched %q, version %s); want a delta to %s with moved = %s",
			v1, e.Kind, e.Empty, e.Watched, e.Version, v2, ip)
	}
	// The delta carries only the change, not the table.
	if e.Bytes >= ea.Bytes {
		t.Errorf("resume delta is %d bytes, the full table %d", e.Bytes, ea.Bytes)
	}

	// A comes back (a new process that never saw v1 or the change); B is
	// killed; both agents move to A and, holding A's current content,
	// get an empty delta, not a table.
	a = startReplica(t, c, a.grpc)
	back.stop()
	moving := startAgent(t, loadagent.Config{Addrs: []string{b.grpc, a.grpc}, Namespace: ns, Pod: "mover", Index: 0, Version: v2})
	if e := moving.next(t, "agent on B"); e.Kind != "delta" || !e.Empty {
		t.Fatalf("agent resuming on B at its version: got %s (empty %v), want an empty delta", e.Kind, e.Empty)
	}
	b.kill()
	e = moving.next(t, "agent moved to A")
	if e.Addr != a.grpc || e.Kind != "delta" || !e.Empty || e.Version != v2 {
		t.Fatalf("after B died: got %s from %s (empty %v, version %s); want an empty delta from A at %s", e.Kind, e.Addr, e.Empty, e.Version, v2)
	}
}

// findMetric reads an unlabelled metric's value from a /metrics response.
func findMetric(resp *http.Response, name string) (float64, bool) {
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}
