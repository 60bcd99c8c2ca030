package proxy

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/nametable"
	"github.com/meshdns/meshdns/pkg/policy"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// The search-domain tunnel and the cluster domain without a Kubernetes
// source, through the real upstream Resolver to a real upstream on
// loopback that notes every name it is asked: what would leave the pod.

// namesUpstream is a real DNS server on 127.0.0.1:0 that answers every
// name with A 192.0.2.53, as a domain's own nameserver would answer the
// labels of a tunnel, and notes each name it is asked (lower case).
type namesUpstream struct {
	addr  string
	mu    sync.Mutex
	names []string // guarded by mu
}

func startNamesUpstream(t testing.TB) *namesUpstream {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &namesUpstream{addr: pc.LocalAddr().String()}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		q := r.Question[0]
		u.mu.Lock()
		u.names = append(u.names, strings.ToLower(q.Name))
		u.mu.Unlock()
		m := new(dns.Msg)
		m.SetReply(r)
		if q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A: net.IPv4(192, 0, 2, 53)})
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return u
}

// asked returns the names asked since the first n.
func (u *namesUpstream) asked(n int) []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.names[n:])
}

func (u *namesUpstream) len() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.names)
}

// policyStack runs a Server with the real upstream Resolver against u,
// the pod's search list search, and table t under p.
func policyStack(t testing.TB, u *namesUpstream, search []string, table Lookuper, p *Policy) *Server {
	t.Helper()
	r, err := upstream.New(upstream.Config{Upstreams: []string{u.addr}, Timeout: time.Second, Registry: newTestRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	cfg := testConfig(r)
	cfg.Search = search
	s := startServer(t, cfg)
	s.SetTablePolicy(table, p)
	return s
}

func mustPolicy(t testing.TB, cfg policy.Config) *Policy {
	t.Helper()
	p, err := NewPolicy(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// tunnelSearch is a pod's search list with a domain of its own choosing
// (dnsConfig.searches) that no rule allows.
var tunnelSearch = []string{"demo.svc.cluster.local", "svc.cluster.local", "cluster.local", "evil.test"}

// A forwarded name is forwarded only when allowed as written: data in the
// labels of an allowed wildcard, or an allowed name, written under a search
// domain no rule allows never reaches the upstream, and the name as
// written still does.
func TestPolicySearchTunnel(t *testing.T) {
	for _, resp := range []policy.Response{policy.NXDOMAIN, policy.Refused} {
		t.Run(resp.String(), func(t *testing.T) {
			u := startNamesUpstream(t)
			p := mustPolicy(t, policy.Config{
				Rules: []policy.Rule{
					{Pattern: "*.wild.example", Action: policy.Allow},
					{Pattern: "allowed.example", Action: policy.Allow},
				},
				OutsideDefault: policy.Deny,
				DenyResponse:   resp,
			})
			s := policyStack(t, u, tunnelSearch, realTable(t), p)
			cases := []struct {
				qname string
				rcode int
				asked []string
			}{
				{qname: "secret-data-0001.wild.example.evil.test.", rcode: dns.RcodeNameError},
				{qname: "allowed.example.evil.test.", rcode: dns.RcodeNameError},
				{qname: "Allowed.Example.Evil.Test.", rcode: dns.RcodeNameError},
				// The walk goes on to the name as written, which is asked.
				{qname: "secret-data-0001.wild.example.", asked: []string{"secret-data-0001.wild.example."}},
				{qname: "allowed.example.", asked: []string{"allowed.example."}},
				// Denied as written: the policy's own response.
				{qname: "evil.test.", rcode: map[policy.Response]int{policy.NXDOMAIN: dns.RcodeNameError, policy.Refused: dns.RcodeRefused}[resp]},
			}
			for _, tc := range cases {
				before := u.len()
				m := exchange(t, "udp", udpAddr(s), newQuery(tc.qname, dns.TypeA))
				if m.Rcode != tc.rcode {
					t.Errorf("%s: rcode %s, want %s", tc.qname, dns.RcodeToString[m.Rcode], dns.RcodeToString[tc.rcode])
				}
				if diff := cmp.Diff(tc.asked, u.asked(before), cmpopts.EquateEmpty()); diff != "" {
					t.Errorf("%s: names the upstream got (-want +got):\n%s", tc.qname, diff)
				}
			}
			before := u.len()
			for range 1000 {
				q := fmt.Sprintf("%016x.%08x.wild.example.evil.test.", rand.Uint64(), rand.Uint32())
				if m := exchange(t, "udp", udpAddr(s), newQuery(q, dns.TypeTXT)); m.Rcode != dns.RcodeNameError {
					t.Fatalf("%s: rcode %s, want NXDOMAIN", q, dns.RcodeToString[m.Rcode])
				}
			}
			if got := u.asked(before); len(got) != 0 {
				t.Errorf("1,000 tunnel names under a search domain: %d reached the upstream, first %q", len(got), got[0])
			}
		})
	}
}

// fileTable is a table from a control plane without a Kubernetes source:
// its one zone is corp.example, not the cluster domain.
func fileTable(t testing.TB, zones []string, forwardPods bool) *nametable.Table {
	t.Helper()
	tbl, err := nametable.New([]nametable.Entry{{
		Hostname: "db.corp.example", Registry: "File", IPs: []netip.Addr{netip.MustParseAddr("10.9.0.1")},
	}}, zones, nametable.Context{Namespace: "demo", Search: podSearch, ForwardPods: forwardPods})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// Without a table complete for the cluster domain nobody the agent knows
// answers a name inside it: such a name is judged as an outside name, by
// the stricter of the two defaults, and never forwarded because the table
// default allows. With a Kubernetes source's zone, forwarded pod records
// keep the table default.
func TestPolicyClusterDomainUnowned(t *testing.T) {
	deny := policy.Deny
	cases := []struct {
		name           string
		zones          []string
		table, outside policy.Action
		qname          string
		rcode          int
		asked          bool
		rule           string
	}{
		{name: "no zone, outside denies", zones: []string{"corp.example"}, outside: deny,
			qname: "denied.example.cluster.local.", rcode: dns.RcodeNameError, rule: "outside_default"},
		{name: "no zone, an expansion", zones: []string{"corp.example"}, outside: deny,
			qname: "denied.example.demo.svc.cluster.local.", rcode: dns.RcodeNameError, rule: "outside_default"},
		{name: "no zones at all", outside: deny,
			qname: "denied.example.svc.cluster.local.", rcode: dns.RcodeNameError, rule: "outside_default"},
		{name: "no zone, the table default denies", zones: []string{"corp.example"}, table: deny,
			qname: "x.cluster.local.", rcode: dns.RcodeNameError, rule: "table_default"},
		{name: "no zone, both allow", zones: []string{"corp.example"},
			qname: "x.cluster.local.", asked: true, rule: "outside_default"},
		{name: "zone above the cluster domain", zones: []string{"local"}, outside: deny,
			qname: "1-2-3-4.demo.pod.cluster.local.", asked: true, rule: "table_default"},
		{name: "cluster zone, pod record forwarded", zones: []string{"cluster.local"}, outside: deny,
			qname: "1-2-3-4.demo.pod.cluster.local.", asked: true, rule: "table_default"},
		{name: "table name", zones: []string{"corp.example"}, outside: deny,
			qname: "db.corp.example.", rule: "table_default"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			u := startNamesUpstream(t)
			p := mustPolicy(t, policy.Config{TableDefault: tc.table, OutsideDefault: tc.outside})
			s := policyStack(t, u, podSearch, fileTable(t, tc.zones, true), p)
			m := exchange(t, "udp", udpAddr(s), newQuery(tc.qname, dns.TypeA))
			if m.Rcode != tc.rcode {
				t.Errorf("rcode %s, want %s", dns.RcodeToString[m.Rcode], dns.RcodeToString[tc.rcode])
			}
			var want []string
			if tc.asked {
				want = []string{tc.qname}
			}
			if diff := cmp.Diff(want, u.asked(0), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("names the upstream got (-want +got):\n%s", diff)
			}
			_, _, v, err := s.Handler().ExplainPolicy(t.Context(), dns.Question{Name: tc.qname, Qtype: dns.TypeA, Qclass: dns.ClassINET})
			if err != nil {
				t.Fatal(err)
			}
			if rule := v.Rule + v.Default; rule != tc.rule {
				t.Errorf("Explain: decided by %q, want %q", rule, tc.rule)
			}
		})
	}
}
