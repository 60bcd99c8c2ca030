package agent

import (
	"crypto/tls"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// startDoTUpstream starts an upstreamServer over DNS-over-TLS (miekg's
// tcp-tls), answering 192.0.2.53; its certificate is for dns.corp.test,
// signed by the CA in its caFile.
func startDoTUpstream(t testing.TB) *upstreamServer {
	t.Helper()
	ca := certtest.NewCA(t, "corp CA")
	certPEM, keyPEM := ca.Issue(t, "dns.corp.test", true, certtest.DNSNames("dns.corp.test"))
	ln, err := tls.Listen("tcp", "127.0.0.1:0", certtest.ServerTLS(t, certPEM, keyPEM, nil))
	if err != nil {
		t.Fatal(err)
	}
	u := &upstreamServer{addr: ln.Addr().String(), caFile: certtest.Write(t, t.TempDir(), "ca.pem", ca.PEM)}
	u.serve(t, &dns.Server{Listener: ln, Net: "tcp-tls"}, answerAll("192.0.2.53"))
	return u
}

func forwardSettings(rules ...*meshdnsv1.ForwardRule) *meshdnsv1.AgentSettings {
	return &meshdnsv1.AgentSettings{Requires: []string{"forwarding"}, Forwarding: rules}
}

// A forwarding rule streamed to one pod's agent sends corp.example to a
// DNS-over-TLS upstream for that pod only; another agent of the same
// cluster keeps the default upstream. A bad rule NACKs its version with
// the last good one kept; a version without the rule sends the name back
// to the default upstream and never serves the rule's cached answer.
func TestControlPlaneForwarding(t *testing.T) {
	def := startNamesUpstream(t)
	corp := startDoTUpstream(t)
	cpA := discoverytest.Start(t, "127.0.0.1:0", nil)
	cpB := discoverytest.Start(t, "127.0.0.1:0", nil)
	a := startAgent(t, Config{ControlPlanes: []string{cpA.Addr}, Upstreams: []string{def.addr}, UpstreamCA: corp.caFile, PodName: "web-0"})
	b := startAgent(t, Config{ControlPlanes: []string{cpB.Addr}, Upstreams: []string{def.addr}, PodName: "batch-0"})
	if f := cpA.Recv(t).GetIdentity().GetFeatures(); !slices.Contains(f, "forwarding") {
		t.Errorf("identity features %q lack forwarding", f)
	}
	cpB.Recv(t)

	table := cpTable(map[string]string{"a.demo.svc.cluster.local": "10.1.0.1"})
	table.Settings = forwardSettings(&meshdnsv1.ForwardRule{
		Domains: []string{"corp.example"}, Upstreams: []string{"tls://" + corp.addr + "@dns.corp.test"}, Source: "demo/corp",
	})
	cpA.Send(discoverytest.Full("v1", "n1", table))
	cpB.Send(discoverytest.Full("v1", "n1", cpTable(map[string]string{"a.demo.svc.cluster.local": "10.1.0.1"})))
	for _, cp := range []*discoverytest.Server{cpA, cpB} {
		if ack := cp.Recv(t); ack.GetVersionInfo() != "v1" || ack.GetErrorDetail() != nil {
			t.Fatalf("ack = %v", ack)
		}
	}
	type result struct {
		Answer              []string
		AskedDef, AskedCorp bool
	}
	ask := func(dnsAddr, name string) result {
		t.Helper()
		m := exchange(t, "udp", dnsAddr, name, dns.TypeA)
		return result{answerData(m), def.asked(name), corp.asked(name)}
	}
	if diff := cmp.Diff(result{[]string{"x.corp.example. A 192.0.2.53"}, false, true}, ask(a.dns, "x.corp.example.")); diff != "" {
		t.Errorf("web-0 x.corp.example (-want +got):\n%s", diff)
	}
	_, body := httpGet(t, a.admin+"/debug/lookup?name=x.corp.example")
	var rep struct {
		Source, Rcode string
		Upstreams     []string
	}
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatal(err)
	}
	if want := []string{"tls://" + corp.addr + "@dns.corp.test"}; rep.Source != "cache" || !slices.Equal(rep.Upstreams, want) {
		t.Errorf("/debug/lookup = %s, want source cache and upstreams %q", body, want)
	}
	if got := ask(b.dns, "y.corp.example."); got.AskedCorp || !got.AskedDef {
		t.Errorf("batch-0 y.corp.example: %+v, want the default upstream only", got)
	}
	if got := ask(a.dns, "www.example.org."); got.AskedCorp || !got.AskedDef {
		t.Errorf("web-0 www.example.org: %+v, want the default upstream only", got)
	}

	// v2's rule names an upstream by host name: NACKed, v1's rule kept.
	d2 := discoverytest.Delta("v2", "n2", "v1", map[string]*meshdnsv1.NameInfo{"b.demo.svc.cluster.local": {Ips: []string{"10.1.0.2"}}})
	d2.GetDelta().Settings = forwardSettings(&meshdnsv1.ForwardRule{Domains: []string{"corp.example"}, Upstreams: []string{"dns.corp.test:53"}})
	cpA.Send(d2)
	nack := cpA.Recv(t)
	if e := nack.GetErrorDetail(); nack.GetVersionInfo() != "v1" || e == nil || !strings.Contains(e.GetMessage(), "dns.corp.test:53") {
		t.Fatalf("nack = %v, want one naming the bad upstream, keeping v1", nack)
	}
	if got := ask(a.dns, "z.corp.example."); got.AskedDef || !got.AskedCorp {
		t.Errorf("web-0 z.corp.example after the NACK: %+v, want the rule's upstream", got)
	}

	// v3 has no rule: corp.example goes to the default upstream, not to
	// the cached answer of the rule's.
	cpA.Send(discoverytest.Full("v3", "n3", cpTable(map[string]string{"a.demo.svc.cluster.local": "10.1.0.1"})))
	if ack := cpA.Recv(t); ack.GetVersionInfo() != "v3" || ack.GetErrorDetail() != nil {
		t.Fatalf("ack = %v", ack)
	}
	if got := ask(a.dns, "x.corp.example."); !got.AskedDef || !slices.Equal(got.Answer, []string{"x.corp.example. A 192.0.2.1"}) {
		t.Errorf("web-0 x.corp.example without the rule: %+v, want the default upstream's answer", got)
	}
}

// convertForwarding refuses what it cannot apply, naming it.
func TestConvertForwarding(t *testing.T) {
	for _, tc := range []struct {
		name    string
		rules   []namewire.ForwardRule
		wantErr string
	}{
		{name: "none"},
		{name: "plain and tls", rules: []namewire.ForwardRule{{Domains: []string{"corp.example."}, Upstreams: []string{"10.0.0.53", "tls://10.0.0.54@dns.corp"}}}},
		{name: "no upstream", rules: []namewire.ForwardRule{{Domains: []string{"corp.example"}}}, wantErr: "needs domains and upstreams"},
		{name: "bad domain", rules: []namewire.ForwardRule{{Domains: []string{"-corp.example"}, Upstreams: []string{"10.0.0.53"}}}, wantErr: "-corp.example"},
		{name: "https", rules: []namewire.ForwardRule{{Domains: []string{"corp.example"}, Upstreams: []string{"https://10.0.0.53/dns-query"}}}, wantErr: "unknown scheme"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := convertForwarding(tc.rules)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("convertForwarding: %v", err)
				}
				return
			}
			if !errors.Is(err, errForwarding) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("convertForwarding: %v, want errForwarding naming %q", err, tc.wantErr)
			}
		})
	}
}
