package webhook

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/controlplane/selfcert"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

// TestCAConfigMapAcrossRotation runs the self-managed CA and the
// ConfigMap keeper against a real API server: a pod injected into a
// namespace projects that namespace's meshdns-ca ConfigMap, which the
// webhook created with the CA; a CA rotation puts the old and the new CA in
// it, and the end of the overlap leaves only the new one. A namespace
// where the ConfigMap cannot be made falls back to the annotation.
func TestCAConfigMapAcrossRotation(t *testing.T) {
	c, asControlPlane := startWithCAConfigMapRBAC(t)
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
	maps := runCAConfigMaps(t, asControlPlane, certs.CABundle, []string{sys})
	w, _ := newTestWebhook(t, Config{CABundle: certs.CABundle, CAConfigMaps: maps})
	// The watch, not the first pod, makes the ConfigMap.
	eventually(t, "ConfigMap of "+apps, func() bool { return maps.Has(apps, certs.CABundle()) })

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

// startWithCAConfigMapRBAC starts an API server and returns it with a
// config acting as the install's control plane with the install's rules
// for ConfigMaps and namespaces only.
func startWithCAConfigMapRBAC(t *testing.T) (*kubetest.Cluster, *rest.Config) {
	t.Helper()
	return kubetest.StartAsControlPlane(t, filepath.Join("..", "..", "examples", "kubernetes", "10-rbac.yaml"), 3, func(r rbacv1.PolicyRule) bool {
		return slices.Contains(r.Resources, "configmaps") || slices.Contains(r.Resources, "namespaces")
	})
}

// runCAConfigMaps runs a keeper until the test ends.
func runCAConfigMaps(t *testing.T, rc *rest.Config, bundle func() []byte, excluded []string) *CAConfigMaps {
	t.Helper()
	maps, err := NewCAConfigMaps(CAConfigMapsConfig{Config: rc, Bundle: bundle, Excluded: append(excluded, DefaultCAExcludedNamespaces...)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = maps.Run(ctx, 50*time.Millisecond, time.Hour)
	}()
	t.Cleanup(func() { cancel(); <-done })
	return maps
}

// TestCAConfigMapNoSideEffects: reviews change nothing in the cluster,
// whatever namespace they name and however many there are; the ConfigMaps
// come from the watch of the namespaces the install selects, and a new
// namespace gets its own after a flood of reviews.
func TestCAConfigMapNoSideEffects(t *testing.T) {
	c, asControlPlane := startWithCAConfigMapRBAC(t)
	ctx := context.Background()
	ca := certtest.NewCA(t, "meshdns-test-ca")
	bundle := func() []byte { return ca.PEM }
	disabled := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "opted-out", Labels: map[string]string{LabelInject: "disabled"}}}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, disabled, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	apps := c.Namespace(t, "apps")
	maps := runCAConfigMaps(t, asControlPlane, bundle, nil)
	w, _ := newTestWebhook(t, Config{CABundle: bundle, CAConfigMaps: maps})
	eventually(t, "ConfigMap of "+apps, func() bool { return maps.Has(apps, ca.PEM) })

	for i := 0; i < 500; i++ {
		ns := []string{"kube-system", disabled.Name, "random-" + strconv.Itoa(i)}[min(i, 2)]
		resp := decodeResponse(t, post(t, w, "/inject", reviewWith(t, func(r *admissionv1.AdmissionRequest) { r.Namespace = ns })))
		if len(resp.Patch) == 0 {
			t.Fatalf("review %d in %s not injected: %+v", i, ns, resp)
		}
	}
	for _, ns := range []string{"kube-system", disabled.Name} {
		if _, err := c.Client.CoreV1().ConfigMaps(ns).Get(ctx, CAConfigMapName, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("ConfigMap %s/%s after reviews naming it: err = %v, want not found", ns, CAConfigMapName, err)
		}
	}
	fresh := c.Namespace(t, "fresh")
	eventually(t, "ConfigMap of the new namespace "+fresh, func() bool {
		cm, err := c.Client.CoreV1().ConfigMaps(fresh).Get(ctx, CAConfigMapName, metav1.GetOptions{})
		return err == nil && cm.Data[caFile] == string(ca.PEM)
	})
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
