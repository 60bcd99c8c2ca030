package server_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	authv1 "k8s.io/api/authentication/v1"

	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/internal/certfile"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
)

// reviewer answers token reviews from a fixed table, as the API server
// would for pod-bound projected tokens; the key is the token's jti claim
// (fakeToken), or the whole token for one that is not a JWT.
type reviewer map[string]authv1.TokenReviewStatus

func (r reviewer) Review(_ context.Context, token string, audiences []string) (*authv1.TokenReviewStatus, error) {
	key := token
	if parts := strings.Split(token, "."); len(parts) == 3 {
		var claims struct{ Jti string }
		if b, err := base64.RawURLEncoding.DecodeString(parts[1]); err == nil && json.Unmarshal(b, &claims) == nil {
			key = claims.Jti
		}
	}
	st, ok := r[key]
	if !ok {
		return &authv1.TokenReviewStatus{Error: "invalid bearer token"}, nil
	}
	return &st, nil
}

// fakeToken is an unsigned token shaped like a projected ServiceAccount
// token for the audience meshdns, unexpired, named name (its jti): the
// control plane's cheap checks let it through to the reviewer.
func fakeToken(name string) string {
	enc := func(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
	return enc(`{"alg":"ES256"}`) + "." + enc(fmt.Sprintf(`{"aud":["meshdns"],"exp":%d,"jti":%q}`, time.Now().Add(time.Hour).Unix(), name)) +
		"." + enc("signature")
}

func podToken(ns, pod string, audiences ...string) authv1.TokenReviewStatus {
	return authv1.TokenReviewStatus{
		Authenticated: true,
		Audiences:     audiences,
		User: authv1.UserInfo{
			Username: "system:serviceaccount:" + ns + ":default",
			Extra: map[string]authv1.ExtraValue{
				"authentication.kubernetes.io/pod-name": {pod},
				"authentication.kubernetes.io/pod-uid":  {"uid-" + pod},
			},
		},
	}
}

// outcome waits for the first response or the stream's end and returns
// the status code (OK for a response, which the agent applies and ACKs).
func outcome(t *testing.T, a *cptest.Agent) codes.Code {
	t.Helper()
	select {
	case r, ok := <-a.Resps:
		if ok && r != nil {
			if err := a.Apply(r); err != nil {
				t.Fatal(err)
			}
			a.Ack(r)
			return codes.OK
		}
		return status.Code(<-a.Errs)
	case <-time.After(time.Minute): // a hang, not a slow machine
		t.Fatal("no response and no refusal within a minute")
	}
	return codes.Unknown
}

func TestAdmissionToken(t *testing.T) {
	ta, err := auth.TokenReview(auth.TokenReviewConfig{Reviewer: reviewer{
		"tok-a":     podToken("ns-a", "web-a", "meshdns"),
		"tok-b":     podToken("ns-b", "web-b", "meshdns"),
		"tok-apisv": podToken("ns-a", "web-a", "https://kubernetes.default.svc"),
		"tok-nopod": {Authenticated: true, Audiences: []string{"meshdns"}, User: authv1.UserInfo{Username: "system:serviceaccount:ns-a:default"}},
		"tok-user":  {Authenticated: true, Audiences: []string{"meshdns"}, User: authv1.UserInfo{Username: "alice"}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{server: func(c *server.Config) { c.Authenticator = ta }})
	h.publish(t, entry("all.corp.example", "10.0.0.1"), entry("only-a.corp.example", "10.0.0.2", "ns-a"),
		entry("only-b.corp.example", "10.0.0.3", "ns-b"))
	tests := []struct {
		name, token, ns, pod string
		want                 codes.Code
		wantIPs              map[string]string
	}{
		{name: "own namespace", token: fakeToken("tok-a"), ns: "ns-a", pod: "web-a", want: codes.OK,
			wantIPs: map[string]string{"all.corp.example": "10.0.0.1", "only-a.corp.example": "10.0.0.2"}},
		{name: "namespace and pod from the token", token: fakeToken("tok-b"), want: codes.OK,
			wantIPs: map[string]string{"all.corp.example": "10.0.0.1", "only-b.corp.example": "10.0.0.3"}},
		{name: "another namespace", token: fakeToken("tok-a"), ns: "ns-b", pod: "web-a", want: codes.PermissionDenied},
		{name: "another pod", token: fakeToken("tok-a"), ns: "ns-a", pod: "db-0", want: codes.PermissionDenied},
		{name: "no token", ns: "ns-a", pod: "web-a", want: codes.Unauthenticated},
		{name: "garbage token", token: "garbage", ns: "ns-a", pod: "web-a", want: codes.Unauthenticated},
		{name: "token for the API server", token: fakeToken("tok-apisv"), ns: "ns-a", pod: "web-a", want: codes.Unauthenticated},
		{name: "token not bound to a pod", token: fakeToken("tok-nopod"), ns: "ns-a", want: codes.Unauthenticated},
		{name: "not a service account", token: fakeToken("tok-user"), ns: "ns-a", want: codes.Unauthenticated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			pod := tc.pod
			if pod == "" {
				pod = cptest.NoPod // the claim is empty; the token names the pod
			}
			a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: tc.ns, Pod: pod, Token: tc.token})
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
	if got := h.metric(t, "meshdns_controlplane_stream_admissions_total", "result", "denied", "method", "token"); got != 2 {
		t.Errorf("denied admissions = %v, want 2", got)
	}
	if got := h.metric(t, "meshdns_controlplane_stream_admissions_total", "result", "unauthenticated", "method", "none"); got != 5 {
		t.Errorf("unauthenticated admissions = %v, want 5", got)
	}
}

func TestAdmissionSPIFFE(t *testing.T) {
	dir := t.TempDir()
	ca := certtest.NewCA(t, "meshdns test ca")
	srvCert, srvKey := ca.Issue(t, "controlplane", true)
	rl, err := certfile.New(certfile.Config{CertFile: certtest.Write(t, dir, "tls.crt", srvCert),
		KeyFile: certtest.Write(t, dir, "tls.key", srvKey), CAFile: certtest.Write(t, dir, "ca.crt", ca.PEM)})
	if err != nil {
		t.Fatal(err)
	}
	tlsConf, err := rl.ServerConfig()
	if err != nil {
		t.Fatal(err)
	}
	sa, err := auth.SPIFFE("cluster.local")
	if err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, harnessOpts{tls: tlsConf, server: func(c *server.Config) { c.Authenticator = sa }})
	h.publish(t, entry("only-a.corp.example", "10.0.0.2", "team-a"))
	issue := func(uris ...string) (c, k []byte) { return ca.Issue(t, "agent", false, certtest.URIs(uris...)) }
	teamA, teamAKey := issue("spiffe://cluster.local/ns/team-a/sa/default")
	teamB, teamBKey := issue("spiffe://cluster.local/ns/team-b/sa/default")
	otherTD, otherTDKey := issue("spiffe://evil.example/ns/team-a/sa/default")
	noSAN, noSANKey := ca.Issue(t, "agent", false)
	tests := []struct {
		name      string
		cert, key []byte
		claim     string
		want      codes.Code
	}{
		{name: "team-a claiming team-a", cert: teamA, key: teamAKey, claim: "team-a", want: codes.OK},
		{name: "team-b claiming team-a", cert: teamB, key: teamBKey, claim: "team-a", want: codes.PermissionDenied},
		{name: "another trust domain", cert: otherTD, key: otherTDKey, claim: "team-a", want: codes.Unauthenticated},
		{name: "no SPIFFE ID", cert: noSAN, key: noSANKey, claim: "team-a", want: codes.Unauthenticated},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: tc.claim, TLS: certtest.ClientTLS(t, ca, tc.cert, tc.key)})
			if got := outcome(t, a); got != tc.want {
				t.Fatalf("outcome %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAdmissionLimits(t *testing.T) {
	h := newHarness(t, harnessOpts{server: func(c *server.Config) {
		c.MaxStreamsPerIdentity = 2
		c.ReconnectBurst = 4
		c.ReconnectRate = 0.001
		c.MaxClusterDomains = 1
	}})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	dial := func(pod, domain string) *cptest.Agent {
		return cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "demo", Pod: pod, ClusterDomain: domain})
	}
	t.Run("streams per identity", func(t *testing.T) {
		a1, a2 := dial("p1", ""), dial("p1", "")
		for _, a := range []*cptest.Agent{a1, a2} {
			if got := outcome(t, a); got != codes.OK {
				t.Fatalf("stream within the limit: %v", got)
			}
		}
		if got := outcome(t, dial("p1", "")); got != codes.ResourceExhausted {
			t.Fatalf("third stream: %v, want ResourceExhausted", got)
		}
		if got := outcome(t, dial("p2", "")); got != codes.OK {
			t.Fatalf("another pod: %v, want OK", got)
		}
	})
	t.Run("reconnect rate", func(t *testing.T) {
		// p3 has a budget of 4 streams; the refill is negligible.
		for i := range 4 {
			a := dial("p3", "")
			if got := outcome(t, a); got != codes.OK {
				t.Fatalf("stream %d: %v", i, got)
			}
			a.Close()
			waitFor(t, "stream closed", func() bool { return len(h.srv.Agents()) < 5 })
		}
		if got := outcome(t, dial("p3", "")); got != codes.ResourceExhausted {
			t.Fatalf("fifth stream in a row: %v, want ResourceExhausted", got)
		}
	})
	t.Run("cluster domains", func(t *testing.T) {
		if got := outcome(t, dial("p4", "other.local")); got != codes.OK {
			t.Fatalf("first foreign domain: %v", got)
		}
		if got := outcome(t, dial("p5", "third.local")); got != codes.ResourceExhausted {
			t.Fatalf("second foreign domain: %v, want ResourceExhausted", got)
		}
		if got := outcome(t, dial("p6", "other.local")); got != codes.OK {
			t.Fatalf("the domain in use again: %v", got)
		}
	})
}

func TestInventedNamespacesShareOneView(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	h.publish(t, entry("all.corp.example", "10.0.0.1"), entry("only-a.corp.example", "10.0.0.2", "team-a"))
	for i := range 40 {
		a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: fmt.Sprintf("invented-%d", i)})
		a.Next()
		if diff := cmp.Diff(map[string]string{"all.corp.example": "10.0.0.1"}, a.IPs()); diff != "" {
			t.Fatalf("invented namespace's table (-want +got):\n%s", diff)
		}
	}
	a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "team-a"})
	a.Next()
	if got := h.views.Len(); got != 2 {
		t.Errorf("views = %d, want 2 (team-a and the shared one)", got)
	}

	// A namespace an entry starts naming gets its own view: its agent is
	// told to reconnect, and then sees the entry.
	late := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "late"})
	late.Next()
	h.publish(t, entry("all.corp.example", "10.0.0.1"), entry("only-a.corp.example", "10.0.0.2", "team-a"),
		entry("only-late.corp.example", "10.0.0.3", "late"))
	select {
	case <-late.Resps:
		// the wake-up may arrive before the end
	case <-time.After(5 * time.Second):
	}
	if err := <-late.Errs; status.Code(err) != codes.Unavailable {
		t.Fatalf("agent of a newly named namespace: %v, want Unavailable (reconnect)", err)
	}
	again := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "late"})
	again.Next()
	if got := again.IPs()["only-late.corp.example"]; got != "10.0.0.3" {
		t.Errorf("only-late = %q after reconnect, want 10.0.0.3", got)
	}
}
