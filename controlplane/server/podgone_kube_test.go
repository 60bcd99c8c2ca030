package server_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/controlplane/podmeta"
	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestStreamEndsWithItsPodAPIServer: with a real kube-apiserver issuing
// and reviewing pod-bound tokens and the control plane's pod cache
// (podmeta) watching pods, deleting a pod ends the stream its token
// opened (Unauthenticated); the token opens no new one, while a pod
// created again under the same name connects with its own token.
func TestStreamEndsWithItsPodAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := c.Namespace(t, "ns-a")
	token := func(pod *corev1.Pod) string {
		t.Helper()
		tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "default", &authv1.TokenRequest{
			Spec: authv1.TokenRequestSpec{
				Audiences: []string{"meshdns"}, ExpirationSeconds: ptr(int64(600)),
				BoundObjectRef: &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
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
	pods, err := podmeta.New(podmeta.Config{Config: c.Config})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{server: func(cfg *server.Config) { cfg.Authenticator, cfg.Pods = ta, pods }})
	h.publish(t, entry("all.corp.example", "10.0.0.1"))
	runPods(t, pods)
	known := func(pod *corev1.Pod) {
		t.Helper()
		testenv.Eventually(t, "the pod cache knows "+pod.Name, 30*time.Second, func() bool {
			uid, ok := pods.UID(ns, pod.Name)
			return ok && uid == string(pod.UID)
		})
	}

	web := createPod(ctx, t, c, ns, "web")
	other := createPod(ctx, t, c, ns, "other")
	known(web)
	tok := token(web)
	a := cptest.Dial(t, h.addr, cptest.DialOpts{Token: tok, Pod: cptest.NoPod})
	a.Next()
	b := cptest.Dial(t, h.addr, cptest.DialOpts{Token: token(other), Pod: cptest.NoPod})
	b.Next()

	start := time.Now()
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, web.Name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))}); err != nil {
		t.Fatal(err)
	}
	wantEnd(t, ended(t, a, "its pod was deleted"), "deleted")
	t.Logf("stream ended %v after the pod's deletion was asked", time.Since(start).Round(time.Millisecond))
	if got := outcome(t, cptest.Dial(t, h.addr, cptest.DialOpts{Token: tok, Pod: cptest.NoPod})); got != codes.Unauthenticated {
		t.Errorf("the deleted pod's token: %v, want Unauthenticated", got)
	}

	again := createPod(ctx, t, c, ns, "web")
	known(again)
	if got := outcome(t, cptest.Dial(t, h.addr, cptest.DialOpts{Token: token(again), Pod: cptest.NoPod})); got != codes.OK {
		t.Errorf("the token of a new pod of the same name: %v, want OK", got)
	}
	h.publish(t, entry("all.corp.example", "10.0.0.1"), entry("new.corp.example", "10.0.0.2"))
	b.Next()
	if got := b.IPs()["new.corp.example"]; got != "10.0.0.2" {
		t.Errorf("another pod's stream: new.corp.example = %q, want 10.0.0.2", got)
	}
}

// runPods runs the pod cache until the test ends.
func runPods(t *testing.T, pods *podmeta.Pods) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = pods.Run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
}
