package server_test

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"

	"github.com/meshdns/meshdns/controlplane/admin"
	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/internal/certfile"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// spiffeHarness is a harness serving mTLS with a fresh CA, authenticating
// agents by their SPIFFE ID in trust domain cluster.local.
func spiffeHarness(t *testing.T, configure func(*server.Config)) (*harness, *certtest.CA) {
	t.Helper()
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
	h := newHarness(t, harnessOpts{tls: tlsConf, server: func(c *server.Config) {
		c.Authenticator = sa
		if configure != nil {
			configure(c)
		}
	}})
	return h, ca
}

// TestSPIFFEIdentityLimits: the streams of one SPIFFE ID share one set of
// limits, whatever pods its agents claim: a certificate of team/web
// claiming payments-0 to payments-11 opens MaxPodsPerSPIFFEID times
// MaxStreamsPerIdentity streams, not one per claimed pod; another ID has
// its own.
func TestSPIFFEIdentityLimits(t *testing.T) {
	h, ca := spiffeHarness(t, func(c *server.Config) {
		c.MaxStreamsPerIdentity = 1
		c.MaxPodsPerSPIFFEID = 3
		c.ReconnectBurst = 100 // the stream limit, not the rate, is tested
	})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	web, webKey := ca.Issue(t, "agent", false, certtest.URIs("spiffe://cluster.local/ns/team/sa/web"))
	db, dbKey := ca.Issue(t, "agent", false, certtest.URIs("spiffe://cluster.local/ns/team/sa/db"))
	got := map[codes.Code]int{}
	for i := range 12 {
		a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "team", Pod: fmt.Sprintf("payments-%d", i),
			TLS: certtest.ClientTLS(t, ca, web, webKey)})
		got[outcome(t, a)]++
	}
	if diff := cmp.Diff(map[codes.Code]int{codes.OK: 3, codes.ResourceExhausted: 9}, got); diff != "" {
		t.Errorf("streams of one SPIFFE ID claiming 12 pods (-want +got):\n%s", diff)
	}
	other := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "team", Pod: "payments-0", TLS: certtest.ClientTLS(t, ca, db, dbKey)})
	if got := outcome(t, other); got != codes.OK {
		t.Errorf("another SPIFFE ID: %v, want OK", got)
	}
}

// TestSPIFFEFiledUnderServiceAccount: a SPIFFE agent's stream, and so its
// failing-names report, is filed under what its certificate proves
// (team/sa:web), not under the pod it claims, which /debug/agents shows
// apart; its settings parts see no pod.
func TestSPIFFEFiledUnderServiceAccount(t *testing.T) {
	part := &reportPart{}
	part.asked.Store(true)
	var seen []auth.Identity
	ids := make(chan auth.Identity, 16)
	h, ca := spiffeHarness(t, func(c *server.Config) {
		c.Settings = agentsettings.Compose(part, agentsettings.Func(func(id auth.Identity, _ *meshdnsv1.AgentSettings) {
			select {
			case ids <- id:
			default:
			}
		}))
	})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	cert, key := ca.Issue(t, "agent", false, certtest.URIs("spiffe://cluster.local/ns/team/sa/web"))
	a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "team", Pod: "payments-0",
		Features: []string{agentsettings.FeatureFailingReport}, TLS: certtest.ClientTLS(t, ca, cert, key)})
	r := a.Next()
	a.Send(&meshdnsv1.StreamNameTableRequest{VersionInfo: a.Version, ResponseNonce: r.GetNonce(),
		Failing: &meshdnsv1.FailingNames{WindowSeconds: 60, Names: []*meshdnsv1.FailingName{
			{Name: "ledger.payments.svc.cluster.local.", Rcode: 3, Count: 7},
		}}})
	var reports []admin.PodFailing
	waitFor(t, "the report", func() bool {
		reports = admin.Failing(h.srv.Agents(), "", "", "")
		return len(reports) == 1
	})
	if got := reports[0].Namespace + "/" + reports[0].Pod; got != "team/sa:web" {
		t.Errorf("report filed under %s, want team/sa:web", got)
	}
	info := h.srv.Agents()[0]
	if info.Pod != "sa:web" || info.ClaimedPod != "payments-0" {
		t.Errorf("agent pod %q, claimed %q; want sa:web, payments-0", info.Pod, info.ClaimedPod)
	}
	for len(ids) > 0 {
		seen = append(seen, <-ids)
	}
	for _, id := range seen {
		if id.Pod != "" || id.Method != auth.MethodSPIFFE || id.Namespace != "team" {
			t.Errorf("settings composed for %+v, want SPIFFE identity of team without a pod", id)
		}
	}
	if len(seen) == 0 {
		t.Error("settings never composed")
	}
}
