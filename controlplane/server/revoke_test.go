package server_test

import (
	"crypto/x509"
	"encoding/base64"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authv1 "k8s.io/api/authentication/v1"

	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
)

// fakeTokenUntil is fakeToken expiring at exp.
func fakeTokenUntil(name string, exp time.Time) string {
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	return enc(`{"alg":"ES256"}`) + "." + enc(fmt.Sprintf(`{"aud":["meshdns"],"exp":%d,"jti":%q}`, exp.Unix(), name)) +
		"." + enc("signature")
}

// ended waits for the end of a's stream, reading what comes before, and
// returns its status.
func ended(t *testing.T, a *cptest.Agent, why string) *status.Status {
	t.Helper()
	limit := time.After(time.Minute) // a hang, not a slow machine
	for {
		select {
		case _, ok := <-a.Resps:
			if !ok {
				return status.Convert(<-a.Errs)
			}
		case <-limit:
			t.Fatalf("stream still open a minute after %s", why)
		}
	}
}

// wantEnd checks that a stream ended with Unauthenticated, saying want.
func wantEnd(t *testing.T, st *status.Status, want string) {
	t.Helper()
	if st.Code() != codes.Unauthenticated || !strings.Contains(st.Message(), want) {
		t.Errorf("stream ended with %v %q, want Unauthenticated saying %q", st.Code(), st.Message(), want)
	}
}

// skewedClock is a server clock ahead of the real one by what is stored.
type skewedClock struct{ ahead atomic.Int64 }

func (c *skewedClock) now() time.Time { return time.Now().Add(time.Duration(c.ahead.Load())) }

// until sets the clock so that t is d away.
func (c *skewedClock) until(t time.Time, d time.Duration) { c.ahead.Store(int64(time.Until(t) - d)) }

// TestStreamEndsWithItsCredential: a stream opened with a token ends when
// the token's exp passes, one opened with a SPIFFE certificate when the
// certificate expires; a credential expired by the server's clock opens
// none. The agent is told Unauthenticated, so it reconnects with the
// credential it holds now.
func TestStreamEndsWithItsCredential(t *testing.T) {
	// The server's clock runs ahead so that credentials valid for an hour
	// (TLS and the token precheck use the real clock) expire in seconds;
	// a few, so that admission on a loaded machine is done before.
	const left = 3 * time.Second
	exp := time.Now().Add(time.Hour).Truncate(time.Second)
	t.Run("token", func(t *testing.T) {
		ta, err := auth.TokenReview(auth.TokenReviewConfig{Reviewer: reviewer{"tok-a": podToken("ns-a", "web-a", "meshdns")}})
		if err != nil {
			t.Fatal(err)
		}
		var clock skewedClock
		h := newHarness(t, harnessOpts{server: func(c *server.Config) { c.Authenticator, c.Now = ta, clock.now }})
		h.publish(t, entry("a.corp.example", "10.0.0.1"))
		tok := fakeTokenUntil("tok-a", exp)

		clock.until(exp, -time.Second)
		if got := outcome(t, cptest.Dial(t, h.addr, cptest.DialOpts{Token: tok, Pod: cptest.NoPod})); got != codes.Unauthenticated {
			t.Fatalf("token expired by the server's clock: %v, want Unauthenticated", got)
		}

		clock.until(exp, left)
		a := cptest.Dial(t, h.addr, cptest.DialOpts{Token: tok, Pod: cptest.NoPod})
		a.Next()
		wantEnd(t, ended(t, a, "its token expired"), "expired")
		// Counted as the handler returns, after the agent saw the end.
		waitFor(t, "the stream counted as expired", func() bool {
			return h.metric(t, "meshdns_controlplane_streams_total", "result", "expired") == 1
		})
	})
	t.Run("SPIFFE certificate", func(t *testing.T) {
		var clock skewedClock
		h, ca := spiffeHarness(t, func(c *server.Config) { c.Now = clock.now })
		h.publish(t, entry("a.corp.example", "10.0.0.1"))
		cert, key := ca.Issue(t, "agent", false, certtest.URIs("spiffe://cluster.local/ns/team/sa/web"),
			func(c *x509.Certificate) { c.NotAfter = exp })
		clock.until(exp, left)
		a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "team", TLS: certtest.ClientTLS(t, ca, cert, key)})
		a.Next()
		wantEnd(t, ended(t, a, "its certificate expired"), "expired")
	})
}

// podTokenUID is podToken for audience meshdns, bound to pod UID uid.
func podTokenUID(ns, pod, uid string) authv1.TokenReviewStatus {
	st := podToken(ns, pod, "meshdns")
	st.User.Extra["authentication.kubernetes.io/pod-uid"] = authv1.ExtraValue{uid}
	return st
}

// fakePods is a Pods whose deletions the test announces.
type fakePods struct {
	mu       sync.Mutex
	onDelete func(namespace, name, uid string)
}

func (p *fakePods) OnDelete(f func(namespace, name, uid string)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onDelete = f
}

func (p *fakePods) delete(namespace, name, uid string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onDelete(namespace, name, uid)
}

// TestStreamEndsWithItsPod: the stream of a token bound to a pod ends when
// that pod is deleted, not when an earlier pod of the same name is; a
// token of a pod seen deleted, or replaced by another of its name, opens
// none, while a new pod of the name connects; the streams of other pods
// go on.
func TestStreamEndsWithItsPod(t *testing.T) {
	pods := &fakePods{}
	ta, err := auth.TokenReview(auth.TokenReviewConfig{Reviewer: reviewer{
		"tok-a": podToken("ns-a", "web-a", "meshdns"), "tok-b": podToken("ns-a", "web-b", "meshdns"),
		"tok-c": podToken("ns-a", "web-c", "meshdns"), "tok-c2": podTokenUID("ns-a", "web-c", "uid-of-a-later-web-c"),
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{server: func(c *server.Config) { c.Authenticator, c.Pods = ta, pods }})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	dial := func(tok string) *cptest.Agent {
		return cptest.Dial(t, h.addr, cptest.DialOpts{Token: fakeToken(tok), Pod: cptest.NoPod})
	}
	a, b := dial("tok-a"), dial("tok-b")
	a.Next()
	b.Next()

	pods.delete("ns-a", "web-a", "uid-of-an-earlier-web-a")
	pods.delete("ns-a", "web-a", "uid-web-a")
	wantEnd(t, ended(t, a, "its pod was deleted"), "deleted")
	waitFor(t, "the stream counted as ended by its pod's deletion", func() bool {
		return h.metric(t, "meshdns_controlplane_streams_total", "result", "pod_deleted") == 1
	})

	// The token's verdict is cached; the deletion is remembered.
	if got := outcome(t, dial("tok-a")); got != codes.Unauthenticated {
		t.Errorf("token of the deleted pod: %v, want Unauthenticated", got)
	}
	// web-c was replaced by a pod of the same name, another UID, before
	// its agent connected (the pod cache tells that as a deletion).
	pods.delete("ns-a", "web-c", "uid-web-c")
	if got := outcome(t, dial("tok-c")); got != codes.Unauthenticated {
		t.Errorf("token of a replaced pod: %v, want Unauthenticated", got)
	}
	// The agent of the new web-c, with its own token.
	if got := outcome(t, dial("tok-c2")); got != codes.OK {
		t.Errorf("token of the pod that replaced web-c: %v, want OK", got)
	}
	// b, of another pod, still gets versions.
	h.publish(t, entry("a.corp.example", "10.0.0.1"), entry("b.corp.example", "10.0.0.2"))
	b.Next()
	if got := b.IPs()["b.corp.example"]; got != "10.0.0.2" {
		t.Errorf("another pod's stream: b.corp.example = %q, want 10.0.0.2", got)
	}
}
