package nametable

import (
	"net/netip"
	"testing"

	"github.com/miekg/dns"
)

// addrs parses IP literals.
func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, 0, len(ss))
	for _, s := range ss {
		out = append(out, netip.MustParseAddr(s))
	}
	return out
}

// fixture is a small cluster with the Kubernetes DNS specification's
// examples plus a file entry, wildcards and an ExternalName service.
func fixture() ([]Entry, []string, Context) {
	entries := []Entry{
		{
			Hostname: "kubernetes.default.svc.cluster.local", IPs: addrs("10.3.0.1"),
			Registry: "Kubernetes", ShortName: "kubernetes", Namespace: "default",
			Ports: []Port{{Name: "https", Port: 443, Protocol: "TCP"}},
		},
		{
			Hostname: "web.demo.svc.cluster.local", IPs: addrs("10.3.0.10", "fd00::10"),
			Registry: "Kubernetes", ShortName: "web", Namespace: "demo",
			Ports: []Port{{Name: "http", Port: 80, Protocol: "TCP"}, {Name: "dns", Port: 53, Protocol: "UDP"}, {Port: 9090}},
		},
		{
			Hostname: "headless.default.svc.cluster.local", Registry: "Kubernetes", ShortName: "headless", Namespace: "default",
			Endpoints: []Endpoint{
				{Hostname: "my-pet", IPs: addrs("10.3.0.100")},
				{IPs: addrs("10.3.0.101")},
				{IPs: addrs("fd00::3")},
			},
			Ports: []Port{{Name: "https", Port: 443, Protocol: "TCP"}},
		},
		{Hostname: "ext.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "ext", Namespace: "demo", CanonicalName: "Example.COM"},
		{Hostname: "v6.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "v6", Namespace: "demo", IPs: addrs("fd00::20"), TTL: 5},
		{Hostname: "remote.demo.svc.other.local", Registry: "Kubernetes", ShortName: "remote", Namespace: "demo", IPs: addrs("10.9.0.1")},
		{Hostname: "db.corp.internal", Registry: "File", IPs: addrs("192.168.1.5"), AltHosts: []string{"database.corp.internal"}},
		{Hostname: "*.apps.example.com", Registry: "File", IPs: addrs("10.1.1.1")},
		{Hostname: "*.example.com", Registry: "File", IPs: addrs("10.1.1.2")},
		{Hostname: "*.cdn.example.com", Registry: "File", CanonicalName: "cdn.provider.net"},
	}
	zones := []string{"cluster.local", "10.in-addr.arpa"}
	pod := Context{
		Namespace: "demo",
		Search:    []string{"demo.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.internal"},
	}
	return entries, zones, pod
}

func newFixture(tb testing.TB) *Table {
	tb.Helper()
	entries, zones, pod := fixture()
	t, err := New(entries, zones, pod)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return t
}

// view is a Result in comparable form: records as zone-file text, answer
// owners written the way the Result contract tells a server to write them.
type view struct {
	Action Action
	Rcode  int
	Alias  string
	Answer []string
	Chain  []string
	Chase  string
	Ns     []string
	Extra  []string
}

func viewOf(r Result, qname string) view {
	owner := dns.Fqdn(qname)
	if r.Alias != "" {
		owner = r.Alias
	}
	v := view{Action: r.Action, Rcode: r.Rcode, Alias: r.Alias, Chase: r.Chase}
	for _, rr := range r.Answer {
		c := dns.Copy(rr)
		c.Header().Name = owner
		v.Answer = append(v.Answer, c.String())
	}
	for _, rr := range r.Chain {
		v.Chain = append(v.Chain, rr.String())
	}
	for _, rr := range r.Ns {
		v.Ns = append(v.Ns, rr.String())
	}
	for _, rr := range r.Extra {
		v.Extra = append(v.Extra, rr.String())
	}
	return v
}

// rrs normalizes zone-file lines to the form dns.RR.String prints.
func rrs(tb testing.TB, lines ...string) []string {
	tb.Helper()
	out := make([]string, 0, len(lines))
	for _, l := range lines {
		rr, err := dns.NewRR(l)
		if err != nil {
			tb.Fatalf("bad test record %q: %v", l, err)
		}
		out = append(out, rr.String())
	}
	return out
}
