package selfcert

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

const host = "meshdns-controlplane.meshdns-system.svc"

// env is a real API server with the webhook configuration installed, as
// the manifests do, with no caBundle.
type env struct {
	c   *kubetest.Cluster
	api API
	ns  string
	now time.Time
	mu  sync.Mutex
}

func newEnv(t *testing.T) *env {
	c := kubetest.Start(t)
	api, err := NewAPI(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ns := c.Namespace(t, "certs")
	url := "https://127.0.0.1:1/inject"
	none, fail := admissionv1.SideEffectClassNone, admissionv1.Ignore
	if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(context.Background(),
		&admissionv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "injector-" + ns},
			Webhooks: []admissionv1.MutatingWebhook{{
				Name: "inject.meshdns.io", ClientConfig: admissionv1.WebhookClientConfig{URL: &url},
				SideEffects: &none, FailurePolicy: &fail, AdmissionReviewVersions: []string{"v1"},
				// Matches nothing, so the unreachable URL never matters.
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"never": "matches"}},
			}},
		}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	return &env{c: c, api: api, ns: ns, now: time.Now()}
}

func (e *env) clock() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

func (e *env) advance(d time.Duration) {
	e.mu.Lock()
	e.now = e.now.Add(d)
	e.mu.Unlock()
}

func (e *env) manager(t *testing.T, reg prometheus.Registerer) *Manager {
	m, err := New(Config{API: e.api, Namespace: e.ns, DNSNames: []string{host}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		WebhookConfigs: []string{"injector-" + e.ns}, Validity: 90 * 24 * time.Hour, Now: e.clock, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// bundle reads the caBundle the API server would use.
func (e *env) bundle(t *testing.T) []byte {
	mwc, err := e.c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(context.Background(), "injector-"+e.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return mwc.Webhooks[0].ClientConfig.CABundle
}

// verify checks the served certificate against the webhook's caBundle, as
// the API server does, and returns it.
func verify(t *testing.T, m *Manager, bundle []byte, at time.Time) *x509.Certificate {
	t.Helper()
	c, err := m.GetCertificate(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(bundle) {
		t.Fatalf("caBundle holds no certificate: %q", bundle)
	}
	if _, err := c.Leaf.Verify(x509.VerifyOptions{DNSName: host, Roots: pool, CurrentTime: at}); err != nil {
		t.Fatalf("served certificate does not verify against the caBundle: %v", err)
	}
	return c.Leaf
}

// A fresh install: no Secret, a webhook configuration with no caBundle.
// One Ensure creates both certificates, serves them and patches the
// caBundle; a second replica takes the same certificate.
func TestFreshInstall(t *testing.T) {
	e := newEnv(t)
	reg := prometheus.NewRegistry()
	m := e.manager(t, reg)
	if _, err := m.GetCertificate(nil); err == nil {
		t.Fatal("a certificate before Ensure")
	}
	if err := m.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	leaf := verify(t, m, e.bundle(t), e.clock())
	if err := leaf.VerifyHostname("127.0.0.1"); err != nil {
		t.Errorf("not for 127.0.0.1: %v", err)
	}
	if got := testutil.ToFloat64(m.expiry.WithLabelValues("webhook")); got != float64(leaf.NotAfter.Unix()) {
		t.Errorf("expiry metric %v, want %v", got, leaf.NotAfter.Unix())
	}
	sec, err := e.api.GetSecret(context.Background(), e.ns, defaultName)
	if err != nil || len(sec.Data[keyCAKey]) == 0 {
		t.Fatalf("secret: %v %v", err, sec)
	}
	replica := e.manager(t, nil)
	if err := replica.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	if other := verify(t, replica, e.bundle(t), e.clock()); !other.Equal(leaf) {
		t.Errorf("the second replica made its own certificate")
	}
	if got := testutil.ToFloat64(replica.renewals); got != 0 {
		t.Errorf("the second replica renewed %v times", got)
	}
}

// Renewal: when a third of the serving certificate's life is left it is
// replaced under the same CA (the caBundle stays), long before it expires;
// near the CA's end a new CA comes in while the old one stays in the
// bundle, so a client holding either verifies the new certificate.
func TestRenewal(t *testing.T) {
	e := newEnv(t)
	m := e.manager(t, nil)
	ctx := context.Background()
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	first := verify(t, m, e.bundle(t), e.clock())
	firstBundle := e.bundle(t)

	e.advance(50 * 24 * time.Hour) // 40 of 90 days left: not yet
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if c := verify(t, m, e.bundle(t), e.clock()); !c.Equal(first) {
		t.Errorf("renewed with 40 of 90 days left")
	}
	e.advance(15 * 24 * time.Hour) // 25 days left
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	second := verify(t, m, firstBundle, e.clock())
	if second.Equal(first) || !second.NotAfter.After(first.NotAfter) {
		t.Fatalf("not renewed with 25 of 90 days left: %v", second.NotAfter)
	}
	if string(e.bundle(t)) != string(firstBundle) {
		t.Errorf("caBundle changed on a serving certificate renewal")
	}

	e.advance(7 * 365 * 24 * time.Hour) // the CA has less than a third left
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	third := verify(t, m, e.bundle(t), e.clock())
	if third.CheckSignatureFrom(parse(t, firstBundle)) == nil {
		t.Fatalf("CA not rotated")
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(e.bundle(t))
	if _, err := second.Verify(x509.VerifyOptions{DNSName: host, Roots: pool, CurrentTime: e.clock().Add(-7 * 365 * 24 * time.Hour)}); err != nil {
		t.Errorf("the old CA left the bundle at once: %v", err)
	}
}

// A Secret with garbage in it is replaced, not served.
func TestBrokenSecret(t *testing.T) {
	e := newEnv(t)
	if _, err := e.api.CreateSecret(context.Background(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: defaultName, Namespace: e.ns},
		Data:       map[string][]byte{keyCACert: []byte("garbage"), keyCert: []byte("garbage")},
	}); err != nil {
		t.Fatal(err)
	}
	m := e.manager(t, nil)
	if err := m.Ensure(context.Background()); err != nil {
		t.Fatal(err)
	}
	verify(t, m, e.bundle(t), e.clock())
}

func parse(t *testing.T, pemBytes []byte) *x509.Certificate {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pemBytes) {
		t.Fatal("no certificate")
	}
	c, _, err := pair{certPEM: pemBytes, keyPEM: nil}.parseCert()
	if err != nil {
		t.Fatal(err)
	}
	return c
}
