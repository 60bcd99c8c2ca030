package webhook

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/selfcert"
	"github.com/meshdns/meshdns/internal/kubetest"
)

// TestCAConfigMapAcrossRotation runs the self-managed CA and the
// ConfigMap keeper against a real API server: a pod injected into a
// namespace projects that namespace's meshdns-ca ConfigMap, which the
// webhook created with the CA; a CA rotation puts the old and the new CA in
// it, and the end of the overlap leaves only the new one. A namespace
// where the ConfigMap cannot be made falls back to the annotation.
func TestCAConfigMapAcrossRotation(t *testing.T) {
	c := kubetest.Start(t)
	ctx := context.Background()
	sys, apps := c.Namespace(t, "sys"), c.Namespace(t, "apps")
	var mu sync.Mutex
	now := time.Now()
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); now = now.Add(d); mu.Unlock() }

	api, err := selfcert.NewAPI(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	certs, err := selfcert.New(selfcert.Config{API: api, Namespace: sys, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		CAValidity: 3 * time.Hour, Validity: 30 * time.Minute, CAOverlap: 10 * time.Minute, Now: clock})
	if err != nil {
		t.Fatal(err)
	}
	if err := certs.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	maps, err := NewCAConfigMaps(c.Config, certs.CABundle, nil)
	if err != nil {
		t.Fatal(err)
	}
	w, _ := newTestWebhook(t, Config{CABundle: certs.CABundle, CAConfigMaps: maps})

	inject := func(ns string) *corev1.Volume {
		t.Helper()
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app", Image: "app"}}}}
		body := reviewWith(t, func(r *admissionv1.AdmissionRequest) {
			r.Namespace = ns
			r.Object.Raw = []byte(`{"spec":{"containers":[{"name":"app","image":"app"}]}}`)
		})
		got := applyPatch(t, pod, decodeResponse(t, post(t, w, "/inject", body)).Patch)
		for i := range got.Spec.Volumes {
			if v := &got.Spec.Volumes[i]; v.Name == IdentityVolumeName && v.Projected != nil && len(v.Projected.Sources) == 2 {
				return v
			}
		}
		t.Fatalf("no identity volume in %+v", got.Spec.Volumes)
		return nil
	}
	stored := func() []*x509.Certificate {
		t.Helper()
		cm, err := c.Client.CoreV1().ConfigMaps(apps).Get(ctx, CAConfigMapName, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return pemCerts(t, []byte(cm.Data[caFile]))
	}

	vol := inject(apps)
	if cm := vol.Projected.Sources[1].ConfigMap; cm == nil || cm.Name != CAConfigMapName || cm.Items[0].Key != caFile {
		t.Fatalf("CA projection = %+v, want ConfigMap %s", vol.Projected.Sources[1], CAConfigMapName)
	}
	first := stored()
	if len(first) != 1 {
		t.Fatalf("fresh install: %d CAs in the ConfigMap, want 1", len(first))
	}

	// Two thirds of the CA's life: a new CA; the old one stays for the
	// overlap.
	advance(2*time.Hour + 10*time.Minute)
	if err := certs.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := maps.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	during := stored()
	if len(during) != 2 || !during[1].Equal(first[0]) || during[0].Equal(first[0]) {
		t.Fatalf("during the overlap the ConfigMap holds %d CAs, want the new and then the old", len(during))
	}

	advance(11 * time.Minute)
	if err := certs.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := maps.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	after := stored()
	if len(after) != 1 || !after[0].Equal(during[0]) {
		t.Fatalf("after the overlap the ConfigMap holds %d CAs, want only the new one", len(after))
	}
	if !bytes.Equal(certs.CABundle(), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: after[0].Raw})) {
		t.Error("the manager's bundle and the ConfigMap differ")
	}

	// No such namespace: the ConfigMap cannot be created, and the pod
	// trusts the CA of its annotation instead of a ConfigMap that
	// would never come.
	if vol := inject("absent"); vol.Projected.Sources[1].DownwardAPI == nil {
		t.Fatalf("CA projection without a ConfigMap = %+v, want the annotation", vol.Projected.Sources[1])
	}
}

func pemCerts(t *testing.T, data []byte) []*x509.Certificate {
	t.Helper()
	var out []*x509.Certificate
	for {
		var b *pem.Block
		if b, data = pem.Decode(data); b == nil {
			return out
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
}
