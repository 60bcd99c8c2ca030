package kubernetes_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/kubetest"
	"github.com/meshdns/meshdns/internal/testenv"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestGenCerts runs gen-certs.sh against a real API server twice (install,
// then rotation) and checks that the API server would trust the serving
// certificate: the caBundle of every webhook verifies the Secret's
// certificate for the Service's DNS name, and after a rotation the bundle
// still verifies the previous certificate too, which pods serve until the
// kubelet updates their Secret volume.
func TestGenCerts(t *testing.T) {
	testenv.RequireTool(t, "openssl")
	c := kubetest.Start(t)
	assets := testenv.KubeAssets(t)
	if _, err := os.Stat(filepath.Join(assets, "kubectl")); err != nil {
		testenv.RequireTool(t, "kubectl")
	}
	ctx := context.Background()
	objs := manifests(t)
	var ns corev1.Namespace
	typed(t, objs, "Namespace", "meshdns-system", &ns)
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &ns, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var mwc admissionregistrationv1.MutatingWebhookConfiguration
	typed(t, objs, "MutatingWebhookConfiguration", "meshdns-sidecar-injector", &mwc)
	if _, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Create(ctx, &mwc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	run := func() (certPEM []byte, bundle *x509.CertPool, bundleCerts int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "./gen-certs.sh", "30")
		cmd.Env = append(os.Environ(), "KUBECONFIG="+c.Kubeconfig, "PATH="+assets+":"+os.Getenv("PATH"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("gen-certs.sh: %v\n%s", err, out)
		}
		s, err := c.Client.CoreV1().Secrets("meshdns-system").Get(ctx, "meshdns-webhook-certs", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if s.Type != corev1.SecretTypeTLS || len(s.Data["tls.key"]) == 0 {
			t.Fatalf("secret type %q, key %d bytes", s.Type, len(s.Data["tls.key"]))
		}
		got, err := c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, mwc.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		first := got.Webhooks[0].ClientConfig.CABundle
		for _, w := range got.Webhooks {
			if string(w.ClientConfig.CABundle) != string(first) {
				t.Errorf("webhook %s has a different caBundle", w.Name)
			}
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(first) {
			t.Fatalf("caBundle holds no certificate: %q", first)
		}
		n := 0
		for rest := first; ; n++ {
			var b *pem.Block
			if b, rest = pem.Decode(rest); b == nil {
				break
			}
		}
		return s.Data["tls.crt"], pool, n
	}
	verify := func(certPEM []byte, pool *x509.CertPool) error {
		b, _ := pem.Decode(certPEM)
		if b == nil {
			t.Fatal("tls.crt is not PEM")
		}
		cert, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		_, err = cert.Verify(x509.VerifyOptions{DNSName: "meshdns-controlplane.meshdns-system.svc", Roots: pool,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
		return err
	}

	cert1, pool1, n1 := run()
	if n1 != 1 {
		t.Errorf("first caBundle holds %d certificates, want 1", n1)
	}
	if err := verify(cert1, pool1); err != nil {
		t.Fatalf("serving certificate does not verify against the caBundle: %v", err)
	}
	cert2, pool2, n2 := run()
	if string(cert2) == string(cert1) {
		t.Fatal("rotation kept the same certificate")
	}
	if n2 != 2 {
		t.Errorf("rotated caBundle holds %d certificates, want 2 (new and previous CA)", n2)
	}
	for name, cert := range map[string][]byte{"new": cert2, "previous": cert1} {
		if err := verify(cert, pool2); err != nil {
			t.Errorf("%s certificate does not verify against the rotated caBundle: %v", name, err)
		}
	}
}
