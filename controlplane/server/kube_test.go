package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestTokenReviewAPIServer has a real kube-apiserver issue ServiceAccount
// tokens bound to pods of two namespaces (TokenRequest API) and verify
// them (TokenReview API) for the control plane.
func TestTokenReviewAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	nsA, nsB := c.Namespace(t, "ns-a"), c.Namespace(t, "ns-b")
	podA, podB := createPod(ctx, t, c, nsA, "web"), createPod(ctx, t, c, nsB, "web")
	token := func(pod *corev1.Pod, audience string) string {
		t.Helper()
		tr, err := c.Client.CoreV1().ServiceAccounts(pod.Namespace).CreateToken(ctx, "default", &authv1.TokenRequest{
			Spec: authv1.TokenRequestSpec{
				Audiences:         []string{audience},
				ExpirationSeconds: ptr(int64(600)),
				BoundObjectRef:    &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
			},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("token request: %v", err)
		}
		return tr.Status.Token
	}
	rv, err := auth.NewReviewer(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ta, err := auth.TokenReview(auth.TokenReviewConfig{Reviewer: rv})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{server: func(cfg *server.Config) { cfg.Authenticator = ta }})
	h.publish(t, entry("all.corp.example", "10.0.0.1"), entry("only-a.corp.example", "10.0.0.2", nsA),
		entry("only-b.corp.example", "10.0.0.3", nsB))

	tokA, tokB := token(podA, "meshdns"), token(podB, "meshdns")
	now := time.Now()
	tests := []struct {
		name, token, ns, pod string
		want                 codes.Code
		wantIPs              map[string]string
	}{
		{name: "ns-a token, own namespace", token: tokA, ns: nsA, pod: podA.Name, want: codes.OK,
			wantIPs: map[string]string{"all.corp.example": "10.0.0.1", "only-a.corp.example": "10.0.0.2"}},
		{name: "ns-b token, namespace from the token", token: tokB, pod: cptest.NoPod, want: codes.OK,
			wantIPs: map[string]string{"all.corp.example": "10.0.0.1", "only-b.corp.example": "10.0.0.3"}},
		{name: "ns-a token claiming ns-b", token: tokA, ns: nsB, pod: podA.Name, want: codes.PermissionDenied},
		{name: "ns-a token claiming another pod", token: tokA, ns: nsA, pod: "db-0", want: codes.PermissionDenied},
		{name: "token for another audience", token: token(podA, "https://kubernetes.default.svc"), ns: nsA, want: codes.Unauthenticated},
		{name: "expired token", token: signToken(t, c, podA, now.Add(-2*time.Hour), now.Add(-time.Hour)), ns: nsA, pod: podA.Name, want: codes.Unauthenticated},
		// The same hand-made token, unexpired, passes: the expiry is what
		// the API server refused above.
		{name: "hand-made token, unexpired", token: signToken(t, c, podA, now.Add(-time.Minute), now.Add(time.Hour)), ns: nsA, pod: podA.Name, want: codes.OK},
		{name: "garbage", token: "garbage", ns: nsA, want: codes.Unauthenticated},
		{name: "no token", ns: nsA, want: codes.Unauthenticated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: tc.ns, Pod: tc.pod, Token: tc.token})
			if got := outcome(t, a); got != tc.want {
				t.Fatalf("outcome %v, want %v", got, tc.want)
			}
			if tc.wantIPs == nil {
				return
			}
			if diff := cmp.Diff(tc.wantIPs, a.IPs()); diff != "" {
				t.Errorf("table (-want +got):\n%s", diff)
			}
		})
	}

	// A deleted pod's token no longer opens a stream, once past the
	// verdict caches (the API server's own keeps a success for 10s).
	if err := c.Client.CoreV1().Pods(nsB).Delete(ctx, podB.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the token of a deleted pod refused", 30*time.Second, func() bool {
		fresh, err := auth.TokenReview(auth.TokenReviewConfig{Reviewer: rv})
		if err != nil {
			t.Fatal(err)
		}
		_, err = fresh.Authenticate(ctx, auth.Request{Token: tokB})
		return errors.Is(err, auth.ErrInvalid)
	})
}

func createPod(ctx context.Context, t *testing.T, c *kubetest.Cluster, ns, name string) *corev1.Pod {
	t.Helper()
	p, err := c.Client.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{ServiceAccountName: "default", Containers: []corev1.Container{{Name: "app", Image: "app"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod: %v", err)
	}
	return p
}

// signToken makes a pod-bound ServiceAccount token valid from nbf to exp,
// signed with the cluster's service-account key, as the API server's
// TokenRequest would (which refuses to issue one already expired).
func signToken(t *testing.T, c *kubetest.Cluster, pod *corev1.Pod, nbf, exp time.Time) string {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(c.Dir, "sa.key"))
	if err != nil {
		t.Fatal(err)
	}
	blk, _ := pem.Decode(raw)
	key, err := x509.ParseECPrivateKey(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := c.Client.CoreV1().ServiceAccounts(pod.Namespace).Get(context.Background(), "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		t.Fatal(err)
	}
	kid := sha256.Sum256(pub)
	header := map[string]string{"alg": "ES256", "kid": base64.RawURLEncoding.EncodeToString(kid[:])}
	claims := map[string]any{
		"iss": "https://kubernetes.default.svc.cluster.local",
		"aud": []string{"meshdns"},
		"sub": "system:serviceaccount:" + pod.Namespace + ":default",
		"iat": nbf.Unix(), "nbf": nbf.Unix(), "exp": exp.Unix(),
		"kubernetes.io": map[string]any{
			"namespace":      pod.Namespace,
			"pod":            map[string]string{"name": pod.Name, "uid": string(pod.UID)},
			"serviceaccount": map[string]string{"name": "default", "uid": string(sa.UID)},
		},
	}
	enc := func(v any) string {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return base64.RawURLEncoding.EncodeToString(b)
	}
	signing := enc(header) + "." + enc(claims)
	sum := sha256.Sum256([]byte(signing))
	r, s, err := ecdsa.Sign(rand.Reader, key, sum[:])
	if err != nil {
		t.Fatal(err)
	}
	sig := make([]byte, 64)
	r.FillBytes(sig[:32])
	s.FillBytes(sig[32:])
	return signing + "." + base64.RawURLEncoding.EncodeToString(sig)
}

func ptr[T any](v T) *T { return &v }
