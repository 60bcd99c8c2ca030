package selfcert

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAPIServerTrustsAcrossRotation serves a mutating webhook with the
// manager's certificate and lets the real API server call it: a pod
// created after a fresh install is mutated with no manual step (the
// manager set the caBundle), and so is one created after the CA and the
// serving certificate rotated.
func TestAPIServerTrustsAcrossRotation(t *testing.T) {
	e := newEnv(t)
	// Short lives, so that the rotated certificates (backdated an hour
	// for clock skew) are valid for the API server's real clock too.
	m, err := New(Config{API: e.api, Namespace: e.ns, IPs: []net.IP{net.IPv4(127, 0, 0, 1)},
		WebhookConfigs: []string{"injector-" + e.ns}, Validity: 30 * time.Minute, CAValidity: time.Hour, Now: e.clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(mutate), TLSConfig: &tls.Config{GetCertificate: m.GetCertificate}}
	go func() { _ = srv.ServeTLS(lis, "", "") }()
	t.Cleanup(func() { _ = srv.Close() })

	// Point the installed configuration at the server, for this
	// namespace only, and fail closed so a TLS error shows.
	cs := e.c.Client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	mwc, err := cs.Get(ctx, "injector-"+e.ns, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url, fail := "https://"+lis.Addr().String()+"/", admissionv1.Fail
	mwc.Webhooks[0].ClientConfig.URL = &url
	mwc.Webhooks[0].FailurePolicy = &fail
	mwc.Webhooks[0].NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": e.ns}}
	mwc.Webhooks[0].Rules = []admissionv1.RuleWithOperations{{Operations: []admissionv1.OperationType{admissionv1.Create},
		Rule: admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"configmaps"}}}}
	if _, err := cs.Update(ctx, mwc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	create := func(name string) {
		t.Helper()
		var last error
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			cm, err := e.c.Client.CoreV1().ConfigMaps(e.ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
			if err == nil && cm.Labels["mutated"] == "yes" {
				return
			}
			if err == nil {
				// The API server learns of the updated configuration
				// through its own watch: until then configmaps are not
				// among its rules and pass unmutated.
				err = fmt.Errorf("%s created but not mutated", name)
				_ = e.c.Client.CoreV1().ConfigMaps(e.ns).Delete(ctx, name, metav1.DeleteOptions{})
			}
			last = err
			time.Sleep(200 * time.Millisecond) // the API server's webhook client may still hold the old caBundle
		}
		t.Fatalf("create %s through the webhook: %v", name, last)
	}
	create("fresh")
	before := m.CABundle()
	e.advance(50 * time.Minute) // 10 of 60 minutes left: a new CA
	if err := m.Ensure(ctx); err != nil {
		t.Fatal(err)
	}
	if string(m.CABundle()) == string(before) {
		t.Fatal("the CA did not rotate")
	}
	create("rotated")
}

// mutate is a mutating webhook that labels what it admits.
func mutate(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var review struct {
		Request struct {
			UID string `json:"uid"`
		} `json:"request"`
	}
	_ = json.Unmarshal(body, &review)
	patch := []byte(`[{"op":"add","path":"/metadata/labels","value":{"mutated":"yes"}}]`)
	pt := "JSONPatch"
	_ = json.NewEncoder(w).Encode(map[string]any{
		"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
		"response": map[string]any{"uid": review.Request.UID, "allowed": true, "patch": patch, "patchType": pt},
	})
}
