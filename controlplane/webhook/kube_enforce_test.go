package webhook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/meshdns/meshdns/controlplane/policysource"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

// allocMeter wraps a handler and records what the last request it served
// allocated (the process's allocations while it ran: the test sends one
// at a time) and its body's length.
type allocMeter struct {
	h        http.Handler
	mu       sync.Mutex
	last     uint64
	lastBody int64
}

func (m *allocMeter) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	m.h.ServeHTTP(rw, r)
	runtime.ReadMemStats(&after)
	m.last, m.lastBody = after.TotalAlloc-before.TotalAlloc, r.ContentLength
}

func (m *allocMeter) lastAlloc() (alloc uint64, body int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last, m.lastBody
}

// TestEnforcementAgainstAPIServer registers the example webhook
// configuration in a real API server, with a DNSPolicy in Enforce mode in
// two namespaces, and creates pods as a user allowed to create pods and
// nothing else: what such a pod's author may not do is refused by the API
// server with the webhook's message, and a pod too large to be worth
// decoding costs the webhook little.
func TestEnforcementAgainstAPIServer(t *testing.T) {
	c := kubetest.Start(t, kubetest.WithRBAC())
	ctx := context.Background()
	store := policysource.NewStore()
	var policies []policysource.Policy
	for _, ns := range []string{"governed", "governed-plain"} {
		ps, err := policysource.ParseFile([]byte("apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: lock, namespace: " + ns +
			"}\nspec: {rules: [{pattern: a.example, action: Allow}], outsideDefault: Deny}"))
		if err != nil {
			t.Fatal(err)
		}
		policies = append(policies, ps...)
	}
	store.SetPolicies(policysource.FileOrigin, policies)

	ca := certtest.NewCA(t, "meshdns-webhook-test-ca")
	certPEM, keyPEM := ca.Issue(t, "meshdns-webhook-test", true)
	w, _ := newTestWebhook(t, Config{Template: Template{Image: "example/meshdns:test"}, Policies: store})
	meter := &allocMeter{h: w}
	srv := httptest.NewUnstartedServer(meter)
	srv.TLS = certtest.ServerTLS(t, certPEM, keyPEM, nil)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, exampleWebhookConfig(t, srv.URL, ca.PEM), metav1.CreateOptions{}); err != nil {
		t.Fatalf("register webhook: %v", err)
	}
	for name, labels := range map[string]map[string]string{
		"governed":       {LabelInject: "enabled"},
		"governed-plain": nil,
		"plain":          nil,
	} {
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// No controller makes it here; pods name it.
		if _, err := c.Client.CoreV1().ServiceAccounts(name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	author, err := kubernetes.NewForConfig(c.AsUserWith(t, "pod-author", "pod-author", []rbacv1.PolicyRule{{
		APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"},
	}}))
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "webhook active", func() bool {
		p, err := author.CoreV1().Pods("governed").Create(ctx, restrictedPodNamed("probe"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && countAgents(p) == 1
	})

	edit := func(name string, f func(p *corev1.Pod)) *corev1.Pod {
		p := restrictedPodNamed(name)
		f(p)
		return p
	}
	tests := []struct {
		name      string
		namespace string
		pod       *corev1.Pod
		wantDeny  string
	}{
		{name: "restricted pod is injected", namespace: "governed", pod: restrictedPodNamed("ok")},
		{name: "not opted in, in a namespace not labelled", namespace: "governed-plain", pod: restrictedPodNamed("unasked")},
		{name: "label opt-out", namespace: "governed", pod: edit("label-out", func(p *corev1.Pod) { p.Labels = map[string]string{LabelInject: "false"} }), wantDeny: "opts out"},
		{name: "annotation opt-out", namespace: "governed-plain", pod: edit("annotation-out", func(p *corev1.Pod) {
			p.Annotations = map[string]string{AnnotationInject: "false"}
		}), wantDeny: "opts out"},
		{name: "runs as the proxy", namespace: "governed", pod: edit("as-proxy", func(p *corev1.Pod) {
			p.Spec.Containers[0].SecurityContext.RunAsUser = ptr(int64(1337))
		}), wantDeny: "the meshdns proxy's uid or gid"},
		{name: "image's user", namespace: "governed", pod: edit("image-user", func(p *corev1.Pod) { p.Spec.SecurityContext = nil }), wantDeny: "set runAsUser and runAsGroup"},
		{name: "no policy: proxy uid allowed", namespace: "plain", pod: edit("free", func(p *corev1.Pod) {
			p.Annotations = map[string]string{AnnotationInject: "true"}
			p.Spec.Containers[0].SecurityContext.RunAsUser = ptr(int64(1337))
		})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := author.CoreV1().Pods(tt.namespace).Create(ctx, tt.pod, metav1.CreateOptions{})
			if tt.wantDeny != "" {
				if err == nil || !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tt.wantDeny) {
					t.Fatalf("create: err = %v, want forbidden with %q", err, tt.wantDeny)
				}
				return
			}
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			if n := countAgents(got); n != 1 {
				t.Errorf("stored pod has %d agents, want 1", n)
			}
		})
	}

	// A 2 MB pod of 90,000 tolerations, which the API server stores, in
	// a namespace the pod does not opt into: the webhook leaves it alone
	// without decoding it.
	t.Run("tolerations, not opted in", func(t *testing.T) {
		raw := []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"tolerant"},"spec":{"containers":[{"name":"app","image":"example/app:1"}],"tolerations":[` +
			strings.Repeat(`{"operator":"Exists"},`, 90_000) + `{"operator":"Exists"}]}}`)
		if err := author.CoreV1().RESTClient().Post().Namespace("plain").Resource("pods").Body(raw).
			SetHeader("Content-Type", "application/json").Do(ctx).Error(); err != nil {
			t.Fatalf("create: %v", err)
		}
		// The review's body (read once, the pod kept raw once more) and
		// the server's buffers; decoding the pod took 18 times that.
		got, body := meter.lastAlloc()
		t.Logf("the webhook allocated %d bytes for a %d-byte review of a pod it leaves alone", got, body)
		if limit := uint64(3*body + 2<<20); body <= 0 || got > limit {
			t.Errorf("the webhook allocated %d bytes for a %d-byte review, want at most %d", got, body, limit)
		}
	})
}

// restrictedPodNamed is restrictedPod with a name and an image the API
// server accepts.
func restrictedPodNamed(name string) *corev1.Pod {
	p := restrictedPod()
	p.Name = name
	p.Spec.Containers[0].Image = "example/app:1"
	return p
}
