package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/controlplane/server"
)

// safePod is an injected pod whose agent runs, its readiness probe on
// port (a number, or the name of a container port of 15021).
func safePod(ns, name string, port intstr.IntOrString) corev1.Pod {
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{NodeName: "n1", InitContainers: []corev1.Container{{
			Name:           "meshdns-agent",
			Ports:          []corev1.ContainerPort{{Name: "meshdns-probes", ContainerPort: 15021}},
			ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz/ready", Port: port}}},
		}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, InitContainerStatuses: []corev1.ContainerStatus{{
			Name: "meshdns-agent", Ready: true, State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{}},
		}}},
	}
}

// TestSafeModeAnswer: only a supervisor's safe-mode answer counts, forwarding
// (200) or refusing (503); the agent's own answers and other codes do not.
func TestSafeModeAnswer(t *testing.T) {
	for _, tc := range []struct {
		name string
		code int
		body string
		want string
	}{
		{name: "forwarding", code: 200, body: "safe mode: the agent crashed 3 times in a row within 10s of its start (last: exit status 1)\n",
			want: "safe mode: the agent crashed 3 times in a row within 10s of its start (last: exit status 1)"},
		{name: "refusing", code: 503, body: "safe mode, refusing every query (no plain DNS upstream): crashed\n",
			want: "safe mode, refusing every query (no plain DNS upstream): crashed"},
		{name: "agent ready", code: 200, body: "ok\n"},
		{name: "agent not ready", code: 503, body: "no table yet\n"},
		{name: "not found", code: 404, body: "safe mode: a page that says so"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := safeModeAnswer(tc.code, []byte(tc.body)); got != tc.want {
				t.Errorf("safeModeAnswer(%d, %q) = %q, want %q", tc.code, tc.body, got, tc.want)
			}
		})
	}
}

// TestProbePod: the probe port is read through the API server's
// pods/proxy subresource (a fake API server here; e2e/node reads a real
// one), by number or by the name of the container port, and a refusal
// says what permission is missing.
func TestProbePod(t *testing.T) {
	answers := map[string]struct {
		code int
		body string
	}{
		"/api/v1/namespaces/shop/pods/safe:15021/proxy/healthz/ready":     {200, "safe mode: crashed\n"},
		"/api/v1/namespaces/shop/pods/refusing:15021/proxy/healthz/ready": {503, "safe mode, refusing every query (policy): crashed\n"},
		"/api/v1/namespaces/shop/pods/agent:15021/proxy/healthz/ready":    {200, "ok\n"},
		"/api/v1/namespaces/shop/pods/denied:15021/proxy/healthz/ready": {403,
			`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"pods \"denied\" is forbidden: cannot get resource \"pods/proxy\""}`},
	}
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := answers[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		if a.code == 403 {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(a.code)
		w.Write([]byte(a.body))
	}))
	defer api.Close()
	k, err := newKubeREST(&rest.Config{Host: api.URL})
	if err != nil {
		t.Fatal(err)
	}
	pods := []corev1.Pod{
		safePod("shop", "safe", intstr.FromInt32(15021)),
		safePod("shop", "refusing", intstr.FromString("meshdns-probes")),
		safePod("shop", "agent", intstr.FromInt32(15021)),
		safePod("shop", "denied", intstr.FromInt32(15021)),
	}
	ptrs := make([]*corev1.Pod, len(pods))
	for i := range pods {
		ptrs[i] = &pods[i]
	}
	got := map[string]string{}
	for key, o := range probeSafeMode(context.Background(), k, ptrs) {
		got[key] = o.SafeMode
		if o.Err != nil {
			got[key] = "error: " + o.Err.Error()
		}
	}
	want := map[string]string{
		"shop/safe":     "safe mode: crashed",
		"shop/refusing": "safe mode, refusing every query (policy): crashed",
		"shop/agent":    "",
		"shop/denied":   "error: forbidden: reading it needs get on pods/proxy (docs/operate.md)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("probe outcomes (-want +got):\n%s", diff)
	}
}

// TestMergeFleetSafeMode: a pod no replica lists whose probe port says
// safe mode is shown with the supervisor's reason; one whose port could
// not be read keeps what its status says, and why the port was not read.
func TestMergeFleetSafeMode(t *testing.T) {
	injected := []corev1.Pod{safePod("shop", "safe", intstr.FromInt32(15021)), safePod("shop", "denied", intstr.FromInt32(15021)),
		safePod("shop", "reconnecting", intstr.FromInt32(15021))}
	probes := map[string]probeOutcome{
		"shop/safe":         {SafeMode: "safe mode: the agent crashed 3 times in a row"},
		"shop/denied":       {Err: errProxyForbidden},
		"shop/reconnecting": {},
	}
	fs := &fleetStatus{Replicas: []replicaStatus{{Pod: "cp-a"}}}
	mergeFleet(fs, []corev1.Pod{{ObjectMeta: metav1.ObjectMeta{Name: "cp-a"}}}, [][]server.AgentInfo{nil}, injected, probes, "")
	got := map[string]unsyncedPod{}
	for _, u := range fs.Unsynced {
		got[u.Pod] = u
	}
	if u := got["safe"]; u.SafeMode != "safe mode: the agent crashed 3 times in a row" ||
		!strings.HasPrefix(u.Reason, "agent in safe mode: the agent crashed 3 times in a row") {
		t.Errorf("pod in safe mode: %+v, want its supervisor's reason", u)
	}
	if u := got["denied"]; u.SafeMode != "" || !strings.Contains(u.Reason, "or its supervisor is in safe mode") ||
		!strings.Contains(u.Reason, "probe port not read: forbidden") {
		t.Errorf("pod whose probe port was refused: %+v, want its status's reason and the refusal", u)
	}
	if u := got["reconnecting"]; u.SafeMode != "" || !strings.HasSuffix(u.Reason, "is reconnecting") {
		t.Errorf("pod whose probe port answered as an agent: %+v, want reconnecting, no safe mode", u)
	}
}
