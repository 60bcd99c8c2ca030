package webhook

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// exampleWebhookConfig reads the MutatingWebhookConfiguration users apply
// and points it at url (the in-process webhook) instead of the Service, so
// the test exercises the shipped selectors, not a copy of them.
func exampleWebhookConfig(t *testing.T, url string, caPEM []byte) *admissionregistrationv1.MutatingWebhookConfiguration {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "..", "examples", "kubernetes", "40-webhook.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	if err := yaml.UnmarshalStrict(data, &mwc); err != nil {
		t.Fatal(err)
	}
	for i := range mwc.Webhooks {
		cc := &mwc.Webhooks[i].ClientConfig
		u := url + *cc.Service.Path
		cc.Service, cc.URL, cc.CABundle = nil, &u, caPEM
	}
	return &mwc
}

// labeler is a second webhook that changes every pod after meshdns did,
// which makes the API server call meshdns again (reinvocationPolicy
// IfNeeded): the stored pod must still have one agent.
func labeler(t *testing.T, tlsConf *tls.Config) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil {
			http.Error(rw, err.Error(), http.StatusBadRequest)
			return
		}
		patch := `[{"op":"add","path":"/metadata/labels","value":{"test.meshdns.io/labelled":"yes"}}]`
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true,
			PatchType: ptr(admissionv1.PatchTypeJSONPatch), Patch: []byte(patch)}
		review.Request = nil
		_ = json.NewEncoder(rw).Encode(review)
	}))
	srv.TLS = tlsConf
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestInjectionAgainstAPIServer registers the example webhook
// configuration in a real kube-apiserver, creates pods and checks the pods
// the API server stored.
func TestInjectionAgainstAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	ctx := context.Background()
	ca := certtest.NewCA(t, "meshdns-webhook-test-ca")
	certPEM, keyPEM := ca.Issue(t, "meshdns-webhook-test", true)
	w, _ := newTestWebhook(t, Config{Template: Template{Image: "example/meshdns:test"}})
	srv := httptest.NewUnstartedServer(w)
	srv.TLS = certtest.ServerTLS(t, certPEM, keyPEM, nil)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	stopWebhook := srv.Close

	mwcs := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := mwcs.Create(ctx, exampleWebhookConfig(t, srv.URL, ca.PEM), metav1.CreateOptions{}); err != nil {
		t.Fatalf("register webhook: %v", err)
	}
	// Sorted after meshdns-sidecar-injector, so it runs second.
	lab := labeler(t, certtest.ServerTLS(t, certPEM, keyPEM, nil))
	if _, err := mwcs.Create(ctx, &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "zz-test-labeler"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "labeler.test.meshdns.io",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr(lab + "/"), CABundle: ca.PEM},
			Rules:                   []admissionregistrationv1.RuleWithOperations{podCreateRule()},
			SideEffects:             ptr(admissionregistrationv1.SideEffectClassNone),
			AdmissionReviewVersions: []string{"v1"},
			FailurePolicy:           ptr(admissionregistrationv1.Fail),
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("register labeler: %v", err)
	}

	for name, labels := range map[string]map[string]string{
		"labelled": {LabelInject: "enabled"},
		"plain":    nil,
		"disabled": {LabelInject: "disabled"},
		// The API server's PodSecurity admission would reject the init
		// container's NET_ADMIN here: the selectors must keep meshdns out.
		"baseline":       {LabelInject: "enabled", "pod-security.kubernetes.io/enforce": "baseline"},
		"baseline-plain": {"pod-security.kubernetes.io/enforce": "baseline"},
	} {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The API server picks webhook configurations up asynchronously: wait
	// until a dry-run pod comes back injected.
	eventually(t, "webhook active", func() bool {
		p, err := c.Client.CoreV1().Pods("labelled").Create(ctx, testPod("probe", nil, false), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && countAgents(p) == 1 && p.Labels["test.meshdns.io/labelled"] == "yes"
	})

	preinjected := testPod("preinjected", nil, false)
	preinjected.Spec.InitContainers = []corev1.Container{{Name: AgentContainerName, Image: "example/meshdns:old",
		RestartPolicy: ptr(corev1.ContainerRestartPolicyAlways)}}
	tests := []struct {
		name      string
		namespace string
		pod       *corev1.Pod
		want      bool // injected
	}{
		{name: "labelled namespace", namespace: "labelled", pod: testPod("plain", nil, false), want: true},
		{name: "labelled namespace, opt in", namespace: "labelled", pod: testPod("opt-in", map[string]string{AnnotationInject: "true"}, false), want: true},
		{name: "labelled namespace, opt out", namespace: "labelled", pod: testPod("opt-out", map[string]string{AnnotationInject: "false"}, false)},
		{name: "labelled namespace, host network", namespace: "labelled", pod: testPod("host", nil, true)},
		{name: "labelled namespace, already injected", namespace: "labelled", pod: preinjected},
		{name: "plain namespace", namespace: "plain", pod: testPod("plain", nil, false)},
		{name: "plain namespace, opt in", namespace: "plain", pod: testPod("opt-in", map[string]string{AnnotationInject: "true"}, false), want: true},
		{name: "plain namespace, pod label opt in", namespace: "plain", pod: func() *corev1.Pod {
			p := testPod("label-opt-in", nil, false)
			p.Labels = map[string]string{LabelInject: "true"}
			return p
		}(), want: true},
		{name: "plain namespace, opt out", namespace: "plain", pod: testPod("opt-out", map[string]string{AnnotationInject: "false"}, false)},
		{name: "plain namespace, host network opt in", namespace: "plain", pod: testPod("host", map[string]string{AnnotationInject: "true"}, true)},
		{name: "disabled namespace, opt in", namespace: "disabled", pod: testPod("opt-in", map[string]string{AnnotationInject: "true"}, false)},
		{name: "pod security baseline, labelled namespace", namespace: "baseline", pod: testPod("plain", nil, false)},
		{name: "pod security baseline, opt in", namespace: "baseline-plain", pod: testPod("opt-in", map[string]string{AnnotationInject: "true"}, false)},
	}
	injectedBefore := testutil.ToFloat64(w.metrics.requests.WithLabelValues("injected"))
	wantInjected := 0
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := c.Client.CoreV1().Pods(tt.namespace).Create(ctx, tt.pod, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create pod: %v", err)
			}
			got, err := c.Client.CoreV1().Pods(tt.namespace).Get(ctx, tt.pod.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			checkStored(t, tt.pod, got, tt.want)
		})
		if tt.want {
			wantInjected++
		}
	}
	if got := testutil.ToFloat64(w.metrics.requests.WithLabelValues("injected")) - injectedBefore; got != float64(wantInjected) {
		t.Errorf("webhook injected %v times, want %d (once per injected pod)", got, wantInjected)
	}
	// Every injected pod was changed by the labeler afterwards, so the API
	// server called meshdns again and it declined.
	if got := testutil.ToFloat64(w.metrics.skipped.WithLabelValues(string(skipInjected))); got < float64(wantInjected) {
		t.Errorf("already_injected skips = %v, want at least %d reinvocations", got, wantInjected)
	}

	// A pod Istio injected first (its configuration sorts before
	// meshdns's): the agent takes the documented alternative numbers, so
	// neither sidecar's ports nor uid clash, and Istio's containers stay.
	t.Run("beside Istio's sidecar", func(t *testing.T) {
		sent := istioShapedPod("with-istio")
		if _, err := c.Client.CoreV1().Pods("labelled").Create(ctx, sent, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		got, err := c.Client.CoreV1().Pods("labelled").Get(ctx, sent.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, c := range got.Spec.InitContainers {
			names = append(names, c.Name)
		}
		if diff := cmp.Diff([]string{InitContainerName, AgentContainerName, "istio-init", istioProxyName}, names); diff != "" {
			t.Fatalf("init containers (-want +got):\n%s", diff)
		}
		initC, agent := got.Spec.InitContainers[0], got.Spec.InitContainers[1]
		if uid := *agent.SecurityContext.RunAsUser; uid != 1553 || *agent.SecurityContext.RunAsGroup != 1553 {
			t.Errorf("agent runs as %d:%d, want 1553:1553 (not istio-proxy's 1337)", uid, *agent.SecurityContext.RunAsGroup)
		}
		for _, want := range [][]string{{"--dns-addr", "127.0.0.1:15153"}, {"--admin-addr", "127.0.0.1:15120"}} {
			if !slices.Equal(argValue(agent.Args, want[0]), want[1:]) {
				t.Errorf("agent %s = %q, want %q", want[0], argValue(agent.Args, want[0]), want[1])
			}
		}
		for flag, want := range map[string]string{"--proxy-uid": "1553", "--proxy-gid": "1553", "--proxy-port": "15153"} {
			if got := argValue(initC.Args, flag); !slices.Equal(got, []string{want}) {
				t.Errorf("init container %s = %q, want %s", flag, got, want)
			}
		}
		if got.Annotations[AnnotationShiftedBy] == "" {
			t.Errorf("no %s annotation saying what moved", AnnotationShiftedBy)
		}
		used := map[int32]string{}
		for _, c := range append(append([]corev1.Container(nil), got.Spec.InitContainers...), got.Spec.Containers...) {
			for _, p := range c.Ports {
				if other, ok := used[p.ContainerPort]; ok {
					t.Errorf("port %d declared by %s and %s", p.ContainerPort, other, c.Name)
				}
				used[p.ContainerPort] = c.Name
			}
		}
	})

	// Every template switch yields a pod the API server accepts: a patch
	// it rejects would fail the pod whatever the failurePolicy.
	t.Run("template variants are valid pods", func(t *testing.T) {
		variants := map[string]Template{
			"defaults": DefaultTemplate(),
			"everything on": Template{
				ProxyUID: math.MaxInt32, ProxyGID: 1, DNSPort: 53, AdminPort: 65535, IPv6: true,
				HoldApplicationUntilReady: true, AgentArgs: []string{"--log-level", "debug"}, IptablesArgs: []string{"--disable-ipv6"},
				StateSizeLimit: ptr(resource.MustParse("1Ki")),
			}.over(DefaultTemplate()),
		}
		for name, tmpl := range variants {
			base := testPod("variant", nil, false)
			base.Spec.InitContainers = []corev1.Container{{Name: "migrate", Image: "migrate"}}
			base.Spec.Volumes = []corev1.Volume{{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
			patch, err := tmpl.patch(base)
			if err != nil {
				t.Fatal(err)
			}
			pod := applyPatch(t, base, patch)
			if _, err := c.Client.CoreV1().Pods("plain").Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
				t.Errorf("%s: API server rejects the injected pod: %v", name, err)
			}
		}
	})

	// What injection adds to a pod create, measured through the API
	// server: a namespace whose pods meshdns injects against one whose pods
	// it is never called for (the test labeler runs for both).
	t.Run("admission latency", func(t *testing.T) {
		const n = 20
		mean := func(ns string, wantInjected bool) time.Duration {
			var total time.Duration
			for i := 0; i < n; i++ {
				p := testPod("latency-"+strconv.Itoa(i), nil, false)
				start := time.Now()
				got, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
				total += time.Since(start)
				if err != nil {
					t.Fatal(err)
				}
				if (countAgents(got) == 1) != wantInjected {
					t.Fatalf("%s/%s: %d agents", ns, p.Name, countAgents(got))
				}
			}
			return total / n
		}
		without := mean("disabled", false)
		with := mean("labelled", true)
		t.Logf("pod create through the API server, mean of %d: %v without meshdns, %v injected (%.2fx)",
			n, without, with, float64(with)/float64(without))
	})

	t.Run("webhook down admits pods uninjected", func(t *testing.T) {
		stopWebhook()
		p := testPod("while-down", nil, false)
		if _, err := c.Client.CoreV1().Pods("labelled").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod with the webhook down (failurePolicy Ignore): %v", err)
		}
		got, err := c.Client.CoreV1().Pods("labelled").Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		checkStored(t, p, got, false)
	})
}

// checkStored compares the stored pod with the one sent.
func checkStored(t *testing.T, sent, got *corev1.Pod, wantInjected bool) {
	t.Helper()
	sentAgents := countAgents(sent)
	if wantInjected {
		if n := countAgents(got); n != 1 {
			t.Fatalf("stored pod has %d agents, want exactly 1", n)
		}
		var names []string
		for _, c := range got.Spec.InitContainers {
			names = append(names, c.Name)
		}
		if diff := cmp.Diff([]string{InitContainerName, AgentContainerName}, names); diff != "" {
			t.Errorf("init containers (-want +got):\n%s", diff)
		}
		agent := got.Spec.InitContainers[1]
		if agent.RestartPolicy == nil || *agent.RestartPolicy != corev1.ContainerRestartPolicyAlways {
			t.Errorf("stored agent restartPolicy = %v, want Always (native sidecar)", agent.RestartPolicy)
		}
		if agent.Image != "example/meshdns:test" {
			t.Errorf("agent image = %q", agent.Image)
		}
		if got.Annotations[AnnotationStatus] != "injected" {
			t.Errorf("status annotation = %q", got.Annotations[AnnotationStatus])
		}
		found, podinfo := false, false
		for _, v := range got.Spec.Volumes {
			found = found || v.Name == StateVolumeName
			// The API server validated and stored the downward API
			// projection of the pod's annotations.
			podinfo = podinfo || v.Name == PodInfoVolumeName && v.DownwardAPI != nil && len(v.DownwardAPI.Items) == 1 &&
				v.DownwardAPI.Items[0].FieldRef.FieldPath == "metadata.annotations"
		}
		if !found {
			t.Errorf("no %s volume", StateVolumeName)
		}
		if !podinfo {
			t.Errorf("no %s volume projecting metadata.annotations: %+v", PodInfoVolumeName, got.Spec.Volumes)
		}
		return
	}
	if n := countAgents(got); n != sentAgents {
		t.Errorf("stored pod has %d agents, sent %d: changed although not injected", n, sentAgents)
	}
	if len(got.Spec.InitContainers) != len(sent.Spec.InitContainers) {
		t.Errorf("init containers %d, sent %d", len(got.Spec.InitContainers), len(sent.Spec.InitContainers))
	}
	if _, ok := got.Annotations[AnnotationStatus]; ok {
		t.Errorf("status annotation on an uninjected pod")
	}
}

// argValue returns the values given to flag in args, in order.
func argValue(args []string, flag string) []string {
	var out []string
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			out = append(out, args[i+1])
		}
	}
	return out
}

func countAgents(p *corev1.Pod) int {
	n := 0
	for _, c := range append(append([]corev1.Container(nil), p.Spec.InitContainers...), p.Spec.Containers...) {
		if c.Name == AgentContainerName {
			n++
		}
	}
	return n
}

func testPod(name string, annotations map[string]string, hostNetwork bool) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{
			HostNetwork: hostNetwork,
			Containers:  []corev1.Container{{Name: "app", Image: "example/app:" + strconv.Itoa(len(name))}},
		},
	}
}

func podCreateRule() admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{
		Operations: []admissionregistrationv1.OperationType{admissionregistrationv1.Create},
		Rule: admissionregistrationv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"},
			Resources: []string{"pods"}, Scope: ptr(admissionregistrationv1.NamespacedScope)},
	}
}
