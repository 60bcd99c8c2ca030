package node

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/webhook"
	"github.com/meshdns/meshdns/internal/archtest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// nextVersion is the version stamp of the "new release" the upgrade
// installs, and nextImage its image in the node's containerd.
const (
	nextVersion = "v0.0.0-upgrade-next"
	nextImage   = "localhost/meshdns:next"
)

// testUpgrade upgrades meshdns under a running injected pod, as a rolling
// update of the control plane's Deployment does: a new binary (another
// version stamp) with the same arguments, whose injection template names a
// new image tag, replaces the running control plane (SIGTERM, then the new
// process on the same addresses, as the Service's endpoint moves). The old
// pod resolves a name every 20 ms throughout: none of its lookups may fail
// (its agent keeps serving its table while it reconnects), and the new
// control plane resumes it with a delta, not a full table. Then a new pod
// gets the new image injected and resolves, and the old one still does.
// The new control plane serves the parts that follow; parent's cleanup
// stops it.
func testUpgrade(t, parent *testing.T, e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cs := e.c.Client
	const ns, name, oldPod, newPod = "demo", "stable", "before-upgrade", "after-upgrade"
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := "ok " + svc.Spec.ClusterIP
	isWant := func(out string) bool { return out == want }

	// The new release, built while the old one serves.
	next, nextAgent := filepath.Join(e.dir, "meshdns-next"), filepath.Join(e.dir, "meshdns-agent-next")
	buildVersion(t, next, nextVersion, false)
	buildVersion(t, nextAgent, nextVersion, true)
	if err := e.n.ImportArchive(releaseImage(t, next, nextAgent, e.dir)); err != nil {
		t.Fatal(err)
	}

	p := appPod(oldPod, []string{name})
	p.Spec.Containers[0].Args = []string{"-every", "20ms", name}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	e.firstAfter(t, ns, oldPod, name, time.Time{}, isWant)
	oldIP := podIP(t, ctx, e, ns, oldPod)

	pid, args := controlPlaneProcess(t, e)
	adminAddr := flagValue(args, "--admin-addr")
	before := agentOf(t, adminAddr, ns, oldPod)
	if before.Acked == "" || before.Acked != before.View {
		t.Fatalf("old pod's agent not in sync before the upgrade: %+v", before)
	}
	fullBefore := agentMetric(t, oldIP, `meshdns_discovery_responses_total{kind="full",result="ack"}`)
	deltaBefore := agentMetric(t, oldIP, `meshdns_discovery_responses_total{kind="delta",result="ack"}`)
	connectsBefore := agentMetric(t, oldIP, `meshdns_discovery_connects_total{result="ok"}`)

	// The switch. The template names the new image from now on; the old
	// control plane is told to stop as the kubelet does, and the new one
	// starts with the same arguments once the old has let go of its ports.
	t0 := time.Now()
	tmpl := strings.Replace(templateText(e.grpcAddr), "localhost/meshdns:test", nextImage, 1)
	if err := os.WriteFile(e.template, []byte(tmpl), 0o644); err != nil {
		t.Fatal(err)
	}
	replaceControlPlane(t, parent, e, pid, "controlplane-next", next, args)
	if m := buildInfoLine(t, adminAddr); !strings.Contains(m, `version="`+nextVersion+`"`) {
		t.Errorf("the control plane serving is not the new release: %s", m)
	}
	var resumed agentInfo
	testenv.Eventually(t, "the old pod's agent in sync with the new control plane", time.Minute, func() bool {
		resumed = agentOf(t, adminAddr, ns, oldPod)
		return resumed.Acked != "" && resumed.Acked == resumed.View
	})
	back := e.firstAfter(t, ns, oldPod, name, time.Now(), isWant)

	failed, total := 0, 0
	var fails []string
	for _, r := range e.results(ns, oldPod) {
		if r.name == name && r.at.After(t0) && !r.at.After(back) {
			total++
			if !isWant(r.out) {
				failed++
				fails = append(fails, r.at.Format(time.StampMilli)+" "+r.out)
			}
		}
	}
	t.Logf("upgrade: old pod made %d lookups from the old control plane's SIGTERM until its agent was in sync with the new one (%v), %d failed",
		total, back.Sub(t0).Round(time.Millisecond), failed)
	if total == 0 || failed > 0 {
		t.Errorf("lookups of the old pod during the upgrade: %d of %d failed: %v", failed, total, fails)
	}
	if resumed.AgentVersion != before.AgentVersion || resumed.Acked != before.Acked {
		t.Errorf("old pod's agent after the upgrade: version %q acked %q, want its own %q at the unchanged table %q",
			resumed.AgentVersion, resumed.Acked, before.AgentVersion, before.Acked)
	}
	// It reconnected, and resumed from the version it held: a delta (empty,
	// as nothing changed), no full table.
	t.Logf("old pod's agent %s resumed at %s: streams %v -> %v, full tables %v -> %v, deltas %v -> %v", resumed.AgentVersion, resumed.Acked,
		connectsBefore, agentMetric(t, oldIP, `meshdns_discovery_connects_total{result="ok"}`),
		fullBefore, agentMetric(t, oldIP, `meshdns_discovery_responses_total{kind="full",result="ack"}`),
		deltaBefore, agentMetric(t, oldIP, `meshdns_discovery_responses_total{kind="delta",result="ack"}`))
	if c := agentMetric(t, oldIP, `meshdns_discovery_connects_total{result="ok"}`); c <= connectsBefore {
		t.Errorf("old pod's agent did not reconnect: %v streams, %v before", c, connectsBefore)
	}
	if f := agentMetric(t, oldIP, `meshdns_discovery_responses_total{kind="full",result="ack"}`); f != fullBefore {
		t.Errorf("old pod's agent got a full table on resume: %v full tables applied, %v before", f, fullBefore)
	}
	if d := agentMetric(t, oldIP, `meshdns_discovery_responses_total{kind="delta",result="ack"}`); d <= deltaBefore {
		t.Errorf("old pod's agent got no delta on resume: %v deltas applied, %v before", d, deltaBefore)
	}

	// A pod created now gets the new release's image, and resolves.
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, appPod(newPod, []string{name}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if got, ok := e.waitRound(t, ns, newPod, []string{name}); !ok || got[name] != want {
		t.Fatalf("new pod after the upgrade: %v, want %s", got, want)
	}
	if imgs := meshdnsImages(t, ctx, e, ns, newPod); imgs != nextImage+","+nextImage {
		t.Errorf("new pod's injected images: %s, want %s twice", imgs, nextImage)
	}
	if a := agentOf(t, adminAddr, ns, newPod); a.AgentVersion != nextVersion {
		t.Errorf("new pod's agent reports version %q, want %q", a.AgentVersion, nextVersion)
	}
	// The old pod keeps its old sidecar, and keeps resolving.
	if imgs := meshdnsImages(t, ctx, e, ns, oldPod); strings.Contains(imgs, nextImage) {
		t.Errorf("old pod's injected images changed: %s", imgs)
	}
	e.firstAfter(t, ns, oldPod, name, time.Now(), isWant)
	for _, pod := range []string{oldPod, newPod} {
		_ = cs.CoreV1().Pods(ns).Delete(ctx, pod, metav1.DeleteOptions{})
	}
}

// buildVersion builds the meshdns binary as `make image` does, stamped
// with version; with agent, the sidecar's binary (archtest.AgentMain, as
// the Makefile's AGENT_BUILD).
func buildVersion(t *testing.T, out, version string, agent bool) {
	t.Helper()
	goTool := testenv.RequireTool(t, "go")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	args := []string{"build", "-trimpath", "-ldflags", "-X main.version=" + version, "-o", out, "./cmd/meshdns"}
	if agent {
		args = []string{"build", "-trimpath", "-ldflags", "-s -w -X main.version=" + version, "-o", out, archtest.AgentMain}
	}
	cmd := exec.CommandContext(ctx, goTool, args...)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
}

// releaseImage writes the new release's image (hack/image) named
// nextImage from its meshdns and meshdns-agent binaries and returns its
// archive.
func releaseImage(t *testing.T, bin, agent, dir string) string {
	t.Helper()
	goTool := testenv.RequireTool(t, "go")
	archive := filepath.Join(dir, "meshdns-next.tar")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, "run", "./hack/image", "-name", nextImage,
		"-binary", "linux/"+goruntime.GOARCH+"="+bin, "-agent-binary", "linux/"+goruntime.GOARCH+"="+agent, "-layout", filepath.Join(dir, "oci-next"), "-archive", archive, "-gzip=false")
	cmd.Dir = "../.."
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/image: %v\n%s", err, b)
	}
	return archive
}

// controlPlaneProcess finds the running control plane of e (the test's
// own child: its binary and its template) and returns its PID and
// arguments, which the new release runs with unchanged.
func controlPlaneProcess(t *testing.T, e *env) (int, []string) {
	t.Helper()
	dirs, err := filepath.Glob("/proc/[0-9]*/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	for _, path := range dirs {
		b, err := os.ReadFile(path)
		if err != nil || len(b) == 0 {
			continue
		}
		argv := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
		if len(argv) < 2 || argv[0] != e.meshdns || argv[1] != "controlplane" || flagValue(argv, "--inject-template") != e.template {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(filepath.Dir(path)))
		if err != nil {
			continue
		}
		return pid, argv[1:]
	}
	t.Fatalf("no running control plane %s with template %s", e.meshdns, e.template)
	return 0, nil
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// agentInfo is the part of the control plane's /debug/agents records the
// test reads.
type agentInfo struct {
	Pod, Namespace, AgentVersion, Acked, View string
	// Sent is the version the agent holds once it applies what it was
	// sent: on a new stream, the one it reported holding.
	Sent string
	// Rejected is the version the agent reported crashing on, if any.
	Rejected string
}

// agentOf returns the record of the agent of namespace/pod on the control
// plane at adminAddr (the latest stream), empty if it is not connected.
func agentOf(t *testing.T, adminAddr, ns, pod string) agentInfo {
	t.Helper()
	var all []agentInfo
	if err := json.Unmarshal(get(t, "http://"+adminAddr+"/debug/agents"), &all); err != nil {
		t.Fatal(err)
	}
	var out agentInfo
	for _, a := range all {
		if a.Namespace == ns && a.Pod == pod {
			out = a
		}
	}
	return out
}

// agentMetric reads one sample of the agent of the pod at ip (its admin
// port, as the injected template sets it); 0 if absent.
func agentMetric(t *testing.T, ip, series string) float64 {
	t.Helper()
	for _, l := range strings.Split(string(get(t, "http://"+ip+":15121/metrics")), "\n") {
		if v, ok := strings.CutPrefix(l, series+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", l, err)
			}
			return f
		}
	}
	return 0
}

func buildInfoLine(t *testing.T, adminAddr string) string {
	t.Helper()
	return regexp.MustCompile(`(?m)^meshdns_build_info\{.*\} 1$`).FindString(string(get(t, "http://"+adminAddr+"/metrics")))
}

func get(t *testing.T, url string) []byte {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil || r.StatusCode != http.StatusOK {
		t.Fatalf("get %s: %v %s %s", url, err, r.Status, bytes.TrimSpace(b))
	}
	return b
}

func podIP(t *testing.T, ctx context.Context, e *env, ns, pod string) string {
	t.Helper()
	p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Status.PodIP
}

// meshdnsImages lists the images of the pod's injected containers (the
// init container and the agent), comma-separated.
func meshdnsImages(t *testing.T, ctx context.Context, e *env, ns, pod string) string {
	t.Helper()
	p, err := e.c.Client.CoreV1().Pods(ns).Get(ctx, pod, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var imgs []string
	for _, c := range p.Spec.InitContainers {
		if c.Name == webhook.AgentContainerName || strings.Contains(c.Image, "meshdns") {
			imgs = append(imgs, c.Image)
		}
	}
	return strings.Join(imgs, ",")
}
