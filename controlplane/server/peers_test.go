package server_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	authv1 "k8s.io/api/authentication/v1"

	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/controlplane/server"
)

// stallingReviewer holds every review of a token named "stall" until
// released, and answers the others from reviewer.
type stallingReviewer struct {
	reviewer
	stalled atomic.Int64
	release chan struct{}
}

func (r *stallingReviewer) Review(ctx context.Context, token string, audiences []string) (*authv1.TokenReviewStatus, error) {
	if token == fakeToken("stall") {
		r.stalled.Add(1)
		select {
		case <-r.release:
		case <-ctx.Done():
		}
		return &authv1.TokenReviewStatus{Error: "invalid bearer token"}, nil
	}
	return r.reviewer.Review(ctx, token, audiences)
}

// TestPeerLimits checks the bounds on one peer address before its streams
// are authenticated: its streams under review at once, and its failed
// authentications, after which its new streams are refused before a
// handler runs; another address is served all along.
func TestPeerLimits(t *testing.T) {
	rv := &stallingReviewer{reviewer: reviewer{"tok-a": podToken("ns-a", "web-a", "meshdns")}, release: make(chan struct{})}
	defer close(rv.release)
	ta, err := auth.TokenReview(auth.TokenReviewConfig{Reviewer: rv, CacheTTL: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{server: func(c *server.Config) {
		c.Authenticator = ta
		c.MaxPendingPerPeer = 2
		c.FailedAuthBurst = 3
		c.FailedAuthRate = 1e-6 // no refill within the test
		c.ReconnectBurst = 100
	}})
	h.publish(t, entry("all.corp.example", "10.0.0.1"))
	good := func(t *testing.T) {
		t.Helper()
		a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns-a", Pod: "web-a", Token: fakeToken("tok-a"), Source: "127.0.0.9"})
		if got := outcome(t, a); got != codes.OK {
			t.Fatalf("agent of another address: %v, want OK", got)
		}
		a.Close()
	}

	t.Run("streams under review at once", func(t *testing.T) {
		for range 2 {
			cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns-a", Token: fakeToken("stall"), Source: "127.0.0.2"})
		}
		waitFor(t, "two reviews stalled", func() bool { return rv.stalled.Load() == 2 })
		third := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns-a", Token: fakeToken("stall"), Source: "127.0.0.2"})
		if got := outcome(t, third); got != codes.ResourceExhausted {
			t.Errorf("third stream under review: %v, want ResourceExhausted", got)
		}
		if got := rv.stalled.Load(); got != 2 {
			t.Errorf("%d reviews, want 2: the third was reviewed", got)
		}
		good(t)
	})

	t.Run("failed authentications", func(t *testing.T) {
		before := h.metric(t, "meshdns_controlplane_stream_admissions_total", "result", "limited", "method", "none")
		for i := range 3 {
			a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns-a", Token: "garbage", Source: "127.0.0.3"})
			if got := outcome(t, a); got != codes.Unauthenticated {
				t.Fatalf("garbage %d: %v, want Unauthenticated", i, got)
			}
		}
		for i := range 3 {
			a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "ns-a", Token: fakeToken("tok-a"), Source: "127.0.0.3"})
			if got := outcome(t, a); got != codes.ResourceExhausted {
				t.Fatalf("stream %d after the failures: %v, want ResourceExhausted", i, got)
			}
		}
		if got := h.metric(t, "meshdns_controlplane_stream_admissions_total", "result", "limited", "method", "none") - before; got != 3 {
			t.Errorf("limited admissions = %v, want 3", got)
		}
		good(t)
	})
}

// TestConnectionLimits checks that connections beyond the limit of one
// address are closed as soon as accepted, and counted, while another
// address still connects.
func TestConnectionLimits(t *testing.T) {
	h := newHarness(t, harnessOpts{server: func(c *server.Config) { c.MaxConnectionsPerPeer = 2 }})
	dial := func(src string) net.Conn {
		t.Helper()
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
		c, err := d.Dial("tcp", h.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// closed reports whether the server closed c: a read ends with EOF
	// rather than waiting (the server says nothing until the client does).
	closed := func(c net.Conn) bool {
		c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		return err != nil && !(errors.As(err, &ne) && ne.Timeout())
	}
	first, second := dial("127.0.0.4"), dial("127.0.0.4")
	waitFor(t, "the third connection of one address closed", func() bool { return closed(dial("127.0.0.4")) })
	if closed(first) || closed(second) {
		t.Error("the connections within the limit were closed")
	}
	if closed(dial("127.0.0.5")) {
		t.Error("another address's connection was closed")
	}
	if got := h.metric(t, "meshdns_controlplane_connections_refused_total", "reason", "peer"); got < 1 {
		t.Errorf("refused connections = %v, want at least 1", got)
	}
	first.Close()
	waitFor(t, "a connection accepted again once one closed", func() bool { return !closed(dial("127.0.0.4")) })
}
