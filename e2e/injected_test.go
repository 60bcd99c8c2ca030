package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	corev1 "k8s.io/api/core/v1"

	"github.com/meshdns/meshdns/controlplane/webhook"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// Names the control plane serves in TestInjectedPod, from an entries file.
const (
	injectedName = "api.corp.example"
	injectedIP   = "10.1.2.3"
)

// TestInjectedPod runs the containers the sidecar injector adds, exactly as
// the webhook writes them (command, arguments, user, group, environment,
// probe), in the pod namespace of the capture topology, with a real control
// plane in the cluster namespace. It is what a kubelet would do with the
// injected pod, short of the container runtime: the init container's
// iptables rules plus the sidecar must give an unmodified application its
// names, and the readiness probe must work from outside the pod as the
// kubelet sends it.
func TestInjectedPod(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"ip", "getent", "setpriv", "bash", "iptables"} {
		testenv.RequireTool(t, tool)
	}
	meshdns := buildMeshdns(t)
	// The image's binaries: the init container runs meshdns, the sidecar
	// the agent's own build.
	bins := map[string]string{"meshdns": meshdns, "meshdns-agent": agentBuild.Path(t)}
	tp := newTopology(t)
	pod := injectedPod(t, upstreamIP+":15010")
	if len(pod.Spec.InitContainers) < 2 {
		t.Fatalf("injected pod has %d init containers", len(pod.Spec.InitContainers))
	}
	initC, agent := pod.Spec.InitContainers[0], pod.Spec.InitContainers[1]

	// The control plane, in the cluster namespace, with one entries file
	// that, like the Kubernetes source, makes the cluster zone authoritative.
	entries := filepath.Join(tp.dir, "entries.yaml")
	if err := os.WriteFile(entries, []byte("zones: [corp.example, cluster.local]\nentries:\n  - hostname: "+injectedName+"\n    addresses: [\""+injectedIP+"\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	// The init container: runs to completion, as root, before the agent.
	argv := containerArgv(t, bins, initC)
	if out, err := tp.inPod(nil, argv[0], argv[1:]...); err != nil {
		t.Fatalf("init container %q: %v\n%s", argv, err, out)
	}

	// The sidecar: its user and group, the downward API environment, the
	// state volume at its mount path (a directory here).
	sc := agent.SecurityContext
	if sc == nil || sc.RunAsUser == nil || sc.RunAsGroup == nil || *sc.RunAsUser != *sc.RunAsGroup {
		t.Fatalf("agent securityContext %+v: want runAsUser == runAsGroup", sc)
	}
	state := filepath.Join(tp.dir, "state")
	if err := os.Mkdir(state, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(state, int(*sc.RunAsUser), int(*sc.RunAsGroup)); err != nil {
		t.Fatal(err)
	}
	argv = containerArgv(t, bins, agent)
	for i, a := range argv {
		if a == agent.VolumeMounts[0].MountPath {
			argv[i] = state
		}
	}
	env := downwardEnv(t, agent, map[string]string{"metadata.name": "app-1", "metadata.namespace": "demo"})
	tp.startInPod(t, int(*sc.RunAsUser), "injected-agent.log", env, argv[0], argv[1:]...)

	probe := agent.ReadinessProbe.HTTPGet
	probeURL := fmt.Sprintf("%s:%d%s", podIP, probe.Port.IntValue(), probe.Path)
	// No control plane yet: the agent runs (the probe answers) but is not
	// ready.
	waitProbe(t, tp, probeURL, func(status string) bool { return status != "" })
	if status := probeStatus(tp, probeURL); status == "200" {
		t.Fatalf("agent ready before it has a table")
	}

	cp := exec.Command("ip", "netns", "exec", tp.cluster, meshdns, "controlplane", "--insecure-allow-unauthenticated", "--entries", entries,
		"--grpc-addr", upstreamIP+":15010", "--admin-addr", "127.0.0.1:15014", "--log-level", "warn")
	logf, err := os.Create(filepath.Join(tp.dir, "controlplane.log"))
	if err != nil {
		t.Fatal(err)
	}
	cp.Stdout, cp.Stderr = logf, logf
	if err := cp.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stop(cp)
		logf.Close()
		if t.Failed() {
			data, _ := os.ReadFile(logf.Name())
			t.Logf("controlplane.log:\n%s", tail(data, 4000))
		}
	})

	// The kubelet's view: the readiness probe on the pod IP turns 200 once
	// the first table is in.
	waitProbe(t, tp, probeURL, func(status string) bool { return status == "200" })

	n := tp.queries.len()
	expectGetent(t, tp, "hosts", injectedName, injectedIP)
	expectGetent(t, tp, "hosts", "external.example.org", externalIP)
	lines, _ := tp.queries.since(n)
	sawExternal := false
	// The search walk under the cluster zone ends in the pod (expansion or
	// NXDOMAIN); only names under the node's own search domain and the
	// external name itself go out.
	for _, l := range lines {
		if strings.Contains(l, " "+injectedName+".") || strings.Contains(l, "cluster.local.") {
			t.Errorf("the cluster DNS saw a name the control plane serves: %s", l)
		}
		sawExternal = sawExternal || strings.Contains(l, " external.example.org. ")
	}
	if !sawExternal {
		t.Errorf("the agent did not forward external.example.org to the cluster DNS; it saw %q", lines)
	}
}

// injectedPod sends a plain pod through the webhook (the same handler the
// control plane serves) and returns the patched pod.
func injectedPod(t *testing.T, controlPlane string) *corev1.Pod {
	t.Helper()
	w, err := webhook.New(webhook.Config{
		Template: webhook.Template{ControlPlane: controlPlane},
		Logger:   slog.New(slog.DiscardHandler),
	})
	if err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	review := fmt.Sprintf(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"e2e",`+
		`"resource":{"version":"v1","resource":"pods"},"operation":"CREATE","namespace":"demo","object":%s}}`, raw)
	rec := httptest.NewRecorder()
	w.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/inject", strings.NewReader(review)))
	var out struct {
		Response struct {
			Patch []byte `json:"patch"`
		} `json:"response"`
	}
	if err := json.NewDecoder(io.LimitReader(rec.Body, 1<<20)).Decode(&out); err != nil {
		t.Fatalf("webhook response: %v", err)
	}
	p, err := jsonpatch.DecodePatch(out.Response.Patch)
	if err != nil {
		t.Fatalf("patch: %v", err)
	}
	patched, err := p.Apply(raw)
	if err != nil {
		t.Fatalf("apply patch: %v", err)
	}
	var got corev1.Pod
	if err := json.NewDecoder(bytes.NewReader(patched)).Decode(&got); err != nil {
		t.Fatal(err)
	}
	return &got
}

// containerArgv is the container's command and arguments with the image's
// binary (meshdns, or the sidecar's meshdns-agent) replaced by the one
// built for the test, from bins by name.
func containerArgv(t *testing.T, bins map[string]string, c corev1.Container) []string {
	t.Helper()
	argv := append(append([]string(nil), c.Command...), c.Args...)
	if len(argv) == 0 || bins[filepath.Base(argv[0])] == "" {
		t.Fatalf("container %s runs none of the image's binaries: %q", c.Name, argv)
	}
	argv[0] = bins[filepath.Base(argv[0])]
	return argv
}

// downwardEnv resolves the container's environment the way the kubelet
// does, with the pod's fields from fields.
func downwardEnv(t *testing.T, c corev1.Container, fields map[string]string) []string {
	t.Helper()
	var env []string
	for _, e := range c.Env {
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil {
			rf := e.ValueFrom.ResourceFieldRef
			// As the kubelet does with the default divisor 1: the
			// container's limit in bytes.
			q, ok := c.Resources.Limits[corev1.ResourceName(strings.TrimPrefix(rf.Resource, "limits."))]
			if !ok {
				t.Fatalf("env %s: container has no %s", e.Name, rf.Resource)
			}
			env = append(env, e.Name+"="+strconv.FormatInt(q.Value(), 10))
			continue
		}
		if e.ValueFrom != nil {
			if e.ValueFrom.FieldRef == nil {
				t.Fatalf("env %s: only fieldRef and resourceFieldRef are emulated", e.Name)
			}
			var ok bool
			if v, ok = fields[e.ValueFrom.FieldRef.FieldPath]; !ok {
				t.Fatalf("env %s: field %s not emulated", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		}
		env = append(env, e.Name+"="+v)
	}
	return env
}

// probeStatus sends the readiness probe from the cluster namespace, as the
// kubelet does from the node, and returns the HTTP status ("" when the
// connection fails).
func probeStatus(tp *topology, hostPortPath string) string {
	hostPort, path, _ := strings.Cut(hostPortPath, "/")
	host, port, _ := strings.Cut(hostPort, ":")
	script := fmt.Sprintf(`exec 3<>/dev/tcp/%s/%s && printf 'GET /%s HTTP/1.0\r\nHost: %s\r\n\r\n' >&3 && head -n 1 <&3`, host, port, path, host)
	out, err := tryRun(nil, "ip", "netns", "exec", tp.cluster, "timeout", "2", "bash", "-c", script)
	if err != nil {
		return ""
	}
	f := strings.Fields(out) // HTTP/1.0 200 OK
	if len(f) < 2 {
		return ""
	}
	return f[1]
}

func waitProbe(t *testing.T, tp *topology, url string, ok func(status string) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var status string
	for {
		if status = probeStatus(tp, url); ok(status) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("readiness probe %s: last status %q", url, status)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
