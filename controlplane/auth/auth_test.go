package auth

import (
	"context"
	"crypto/x509"
	"errors"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authv1 "k8s.io/api/authentication/v1"
)

func bound(ns, pod string, audiences ...string) *authv1.TokenReviewStatus {
	return &authv1.TokenReviewStatus{
		Authenticated: true, Audiences: audiences,
		User: authv1.UserInfo{Username: saPrefix + ns + ":default", Extra: map[string]authv1.ExtraValue{
			extraPodName: {pod}, extraPodUID: {"uid"}, extraNodeName: {"node-1"},
		}},
	}
}

func TestIdentityFromReview(t *testing.T) {
	tests := []struct {
		name    string
		st      *authv1.TokenReviewStatus
		want    Identity
		wantErr bool
	}{
		{name: "bound pod token", st: bound("ns-a", "web-0", "meshdns"),
			want: Identity{Method: MethodToken, Namespace: "ns-a", Pod: "web-0", PodUID: "uid", Node: "node-1", ServiceAccount: "default", Subject: "system:serviceaccount:ns-a:default"}},
		{name: "bound pod token without a node (before Kubernetes 1.30)", st: func() *authv1.TokenReviewStatus {
			st := bound("ns-a", "web-0", "meshdns")
			delete(st.User.Extra, extraNodeName)
			return st
		}(), want: Identity{Method: MethodToken, Namespace: "ns-a", Pod: "web-0", PodUID: "uid", ServiceAccount: "default", Subject: "system:serviceaccount:ns-a:default"}},
		{name: "not authenticated", st: &authv1.TokenReviewStatus{Error: "token expired"}, wantErr: true},
		{name: "wrong audience", st: bound("ns-a", "web-0", "api"), wantErr: true},
		{name: "no audience", st: bound("ns-a", "web-0"), wantErr: true},
		{name: "no pod claim", st: &authv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"meshdns"},
			User: authv1.UserInfo{Username: saPrefix + "ns-a:default"}}, wantErr: true},
		{name: "a user", st: &authv1.TokenReviewStatus{Authenticated: true, Audiences: []string{"meshdns"},
			User: authv1.UserInfo{Username: "alice"}}, wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := identityFromReview(tc.st, "meshdns")
			if (err != nil) != tc.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tc.wantErr)
			}
			if err != nil && !errors.Is(err, ErrInvalid) {
				t.Errorf("err %v is not ErrInvalid", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("identity (-want +got):\n%s", diff)
			}
		})
	}
}

type countingReviewer struct {
	calls atomic.Int64
	block chan struct{} // when set, reviews wait for it
	err   error
}

func (r *countingReviewer) Review(_ context.Context, token string, aud []string) (*authv1.TokenReviewStatus, error) {
	r.calls.Add(1)
	if r.block != nil {
		<-r.block
	}
	if r.err != nil {
		return nil, r.err
	}
	if token == goodToken {
		return bound("ns-a", "web-0", aud...), nil
	}
	return &authv1.TokenReviewStatus{Error: "invalid"}, nil
}

func TestTokenReviewCache(t *testing.T) {
	now := time.Unix(1000, 0)
	r := &countingReviewer{}
	a, err := TokenReview(TokenReviewConfig{Reviewer: r, CacheTTL: 10 * time.Second, Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 3 {
		id, err := a.Authenticate(ctx, Request{Token: goodToken})
		if err != nil {
			t.Fatal(err)
		}
		// The stream ends when the token does, cached verdict or not.
		if want := time.Unix(4102444800, 0); !id.Expires.Equal(want) || id.PodUID != "uid" {
			t.Errorf("authentication %d: expires %v, pod UID %q; want %v, uid", i, id.Expires, id.PodUID, want)
		}
		if _, err := a.Authenticate(ctx, Request{Token: badToken}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("bad token: %v", err)
		}
	}
	if got := r.calls.Load(); got != 2 {
		t.Errorf("reviews = %d, want 2 (one per token, then cached)", got)
	}
	now = now.Add(3 * time.Second) // past the negative TTL (2s), within the positive one
	a.Authenticate(ctx, Request{Token: goodToken})
	a.Authenticate(ctx, Request{Token: badToken})
	if got := r.calls.Load(); got != 3 {
		t.Errorf("reviews = %d, want 3 (the refusal asked again)", got)
	}
	if _, err := a.Authenticate(ctx, Request{}); !errors.Is(err, ErrNoCredential) {
		t.Errorf("no token: %v, want ErrNoCredential", err)
	}
}

func TestTokenReviewUnavailable(t *testing.T) {
	r := &countingReviewer{err: errors.New("connection refused")}
	a, _ := TokenReview(TokenReviewConfig{Reviewer: r})
	for range 2 {
		if _, err := a.Authenticate(context.Background(), Request{Token: goodToken}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("err = %v, want ErrUnavailable", err)
		}
	}
	if got := r.calls.Load(); got != 2 {
		t.Errorf("reviews = %d, want 2 (an API failure is not cached)", got)
	}

	block := &countingReviewer{block: make(chan struct{})}
	b, _ := TokenReview(TokenReviewConfig{Reviewer: block, MaxInFlight: 1, QueueTimeout: 10 * time.Millisecond})
	done := make(chan error)
	go func() { _, err := b.Authenticate(context.Background(), Request{Token: goodToken}); done <- err }()
	for block.calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	if _, err := b.Authenticate(context.Background(), Request{Token: otherToken}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("review beyond MaxInFlight: %v, want ErrUnavailable", err)
	}
	close(block.block)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

var spiffeExpiry = time.Unix(1_800_000_000, 0)

// TestSPIFFE: a certificate proves a namespace and service account, never a
// pod, and expires with its chain.
func TestSPIFFE(t *testing.T) {
	a, err := SPIFFE("cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	cert := func(uris ...string) Request {
		c := &x509.Certificate{NotAfter: spiffeExpiry}
		for _, s := range uris {
			u, _ := url.Parse(s)
			c.URIs = append(c.URIs, u)
		}
		return Request{Chains: [][]*x509.Certificate{{c}}}
	}
	tests := []struct {
		name string
		req  Request
		want Identity
		err  error
	}{
		{name: "namespace and service account", req: cert("spiffe://cluster.local/ns/team-a/sa/web"),
			want: Identity{Method: MethodSPIFFE, Namespace: "team-a", ServiceAccount: "web", Subject: "spiffe://cluster.local/ns/team-a/sa/web",
				Expires: spiffeExpiry}},
		{name: "an intermediate expiring first", req: func() Request {
			r := cert("spiffe://cluster.local/ns/team-a/sa/web")
			r.Chains[0] = append(r.Chains[0], &x509.Certificate{NotAfter: spiffeExpiry.Add(-time.Hour)}, &x509.Certificate{NotAfter: spiffeExpiry.Add(time.Hour)})
			return r
		}(), want: Identity{Method: MethodSPIFFE, Namespace: "team-a", ServiceAccount: "web", Subject: "spiffe://cluster.local/ns/team-a/sa/web",
			Expires: spiffeExpiry.Add(-time.Hour)}},
		{name: "no certificate", req: Request{}, err: ErrNoCredential},
		{name: "no SPIFFE ID", req: cert("https://example.com"), err: ErrNoCredential},
		{name: "two SPIFFE IDs", req: cert("spiffe://cluster.local/ns/a/sa/x", "spiffe://cluster.local/ns/b/sa/x"), err: ErrInvalid},
		{name: "another trust domain", req: cert("spiffe://evil.example/ns/team-a/sa/web"), err: ErrInvalid},
		{name: "another path", req: cert("spiffe://cluster.local/team-a/web"), err: ErrInvalid},
		{name: "upper case namespace", req: cert("spiffe://cluster.local/ns/Team-A/sa/web"), err: ErrInvalid},
		{name: "dotted namespace", req: cert("spiffe://cluster.local/ns/../sa/web"), err: ErrInvalid},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := a.Authenticate(context.Background(), tc.req)
			if !errors.Is(err, tc.err) || (err == nil) != (tc.err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("identity (-want +got):\n%s", diff)
			}
		})
	}
}

func TestChain(t *testing.T) {
	s, _ := SPIFFE("cluster.local")
	tr, _ := TokenReview(TokenReviewConfig{Reviewer: &countingReviewer{}})
	c := Chain(tr, s)
	if _, err := c.Authenticate(context.Background(), Request{}); !errors.Is(err, ErrNoCredential) {
		t.Errorf("nothing presented: %v", err)
	}
	if _, err := c.Authenticate(context.Background(), Request{Token: badToken}); !errors.Is(err, ErrInvalid) {
		t.Errorf("bad token: %v, want ErrInvalid (not rescued by the next)", err)
	}
	id, err := Chain(tr, Insecure()).Authenticate(context.Background(), Request{})
	if err != nil || id.Verified() {
		t.Errorf("insecure fallback: %+v %v", id, err)
	}
}
