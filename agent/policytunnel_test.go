package agent

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// namesSince returns the names u was asked after the first n.
func (u *upstreamServer) namesSince(n int) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.names[n:])
}

func (u *upstreamServer) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.names)
}

// policyAgent runs an agent whose pod search list is search, fed by a
// control plane with table, and returns it once the version is applied.
func policyAgent(t *testing.T, up *upstreamServer, search string, table *meshdnsv1.NameTable) *testAgent {
	t.Helper()
	cp := discoverytest.Start(t, "127.0.0.1:0", nil)
	resolv := writeFile(t, t.TempDir(), "resolv.conf", "nameserver 127.0.0.1\nsearch "+search+"\noptions ndots:5\n")
	a := startAgent(t, Config{ControlPlanes: []string{cp.Addr}, Upstreams: []string{up.addr}, ResolvConf: resolv})
	cp.Recv(t) // the identity
	cp.Send(discoverytest.Full("v1", "n1", table))
	if ack := cp.Recv(t); ack.GetVersionInfo() != "v1" || ack.GetErrorDetail() != nil {
		t.Fatalf("ack = %v", ack)
	}
	return a
}

// A pod that adds a domain of its own to its search list
// (dnsConfig.searches) cannot tunnel through it: a name under that search
// domain is forwarded only when the name as written is allowed, so data in
// the labels of an allowed wildcard never reaches the upstream that way,
// and the name as written still resolves.
func TestPolicySearchDomainTunnel(t *testing.T) {
	up := startNamesUpstream(t)
	table := cpTable(map[string]string{"web.demo.svc.cluster.local": "10.1.0.1"})
	table.Settings = &meshdnsv1.AgentSettings{Requires: []string{"policy"}, Policy: &meshdnsv1.DNSPolicy{
		Rules:          []*meshdnsv1.PolicyRule{rule("*.wild.example", allow), rule("allowed.example", allow)},
		OutsideDefault: deny,
		DenyResponse:   meshdnsv1.DenyResponse_DENY_RESPONSE_REFUSED,
	}}
	a := policyAgent(t, up, "demo.svc.cluster.local svc.cluster.local cluster.local evil.test", table)
	cases := []struct {
		name  string
		rcode int
		asked []string
	}{
		{name: "secret-data-0001.wild.example.evil.test.", rcode: dns.RcodeNameError},
		{name: "allowed.example.evil.test.", rcode: dns.RcodeNameError},
		{name: "secret-data-0001.wild.example.", asked: []string{"secret-data-0001.wild.example."}},
		{name: "allowed.example.", asked: []string{"allowed.example."}},
		{name: "web.evil.test.", rcode: dns.RcodeNameError},
		{name: "evil.test.", rcode: dns.RcodeRefused},
	}
	for _, tc := range cases {
		before := up.count()
		if m := exchange(t, "udp", a.dns, tc.name, dns.TypeA); m.Rcode != tc.rcode {
			t.Errorf("%s: rcode %s, want %s", tc.name, dns.RcodeToString[m.Rcode], dns.RcodeToString[tc.rcode])
		}
		if diff := cmp.Diff(tc.asked, up.namesSince(before), cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s: names the upstream got (-want +got)\n%s", tc.name, diff)
		}
	}
	before := up.count()
	for range 1000 {
		name := fmt.Sprintf("%016x.%08x.wild.example.evil.test", rand.Uint64(), rand.Uint32())
		if m := exchange(t, "udp", a.dns, name, dns.TypeA); m.Rcode != dns.RcodeNameError {
			t.Fatalf("%s: rcode %s, want NXDOMAIN", name, dns.RcodeToString[m.Rcode])
		}
	}
	if got := up.namesSince(before); len(got) != 0 {
		t.Errorf("1,000 tunnel names: %d reached the upstream, first %s", len(got), got[0])
	}
}

// A control plane without a Kubernetes source (file-only, or for VMs)
// sends no zone for the cluster domain: nobody the agent knows answers a
// name inside it, so the table default, which allows, never forwards one;
// it is judged as an outside name. With the cluster domain as a zone the
// agent answers it NXDOMAIN itself.
func TestPolicyClusterDomainWithoutKubernetes(t *testing.T) {
	names := []string{"denied.example.cluster.local", "denied.example.demo.svc.cluster.local", "api.stripe.com.svc.cluster.local"}
	for _, zones := range [][]string{{"corp.example"}, nil, {"cluster.local"}} {
		t.Run(fmt.Sprintf("zones %q", zones), func(t *testing.T) {
			up := startNamesUpstream(t)
			table := &meshdnsv1.NameTable{
				Table:              map[string]*meshdnsv1.NameInfo{"db.corp.example": {Ips: []string{"10.9.0.1"}, Registry: "File"}},
				AuthoritativeZones: zones,
				Settings: &meshdnsv1.AgentSettings{Requires: []string{"policy"}, Policy: &meshdnsv1.DNSPolicy{
					Rules:          []*meshdnsv1.PolicyRule{rule("api.stripe.com", allow)},
					OutsideDefault: deny,
				}},
			}
			a := policyAgent(t, up, "demo.svc.cluster.local svc.cluster.local cluster.local", table)
			for _, name := range names {
				for _, qtype := range []uint16{dns.TypeA, dns.TypeAAAA} {
					if m := exchange(t, "udp", a.dns, name, qtype); m.Rcode != dns.RcodeNameError {
						t.Errorf("%s %s: rcode %s, want NXDOMAIN", name, dns.TypeToString[qtype], dns.RcodeToString[m.Rcode])
					}
				}
			}
			if m := exchange(t, "udp", a.dns, "db.corp.example", dns.TypeA); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
				t.Errorf("the table's name: %s with %d answers", dns.RcodeToString[m.Rcode], len(m.Answer))
			}
			if m := exchange(t, "udp", a.dns, "api.stripe.com", dns.TypeA); m.Rcode != dns.RcodeSuccess {
				t.Errorf("api.stripe.com: %s, want NOERROR", dns.RcodeToString[m.Rcode])
			}
			if diff := cmp.Diff([]string{"api.stripe.com."}, up.namesSince(0)); diff != "" {
				t.Errorf("names the upstream got (-want +got)\n%s", diff)
			}
		})
	}
}
