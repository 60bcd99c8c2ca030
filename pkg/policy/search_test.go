package policy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

var podSearch = []string{"demo.svc.cluster.local", "svc.cluster.local", "cluster.local.", "Corp.Example"}

func TestMeant(t *testing.T) {
	tests := []struct {
		name, qname, want string
		ok                bool
	}{
		{name: "longest search domain", qname: "api.stripe.com.svc.cluster.local.", want: "api.stripe.com", ok: true},
		{name: "own namespace", qname: "web.demo.svc.cluster.local.", want: "web", ok: true},
		{name: "node domain any case", qname: "API.stripe.com.corp.EXAMPLE.", want: "API.stripe.com", ok: true},
		{name: "not under a search domain", qname: "api.stripe.com.", ok: false},
		{name: "the search domain itself", qname: "corp.example.", ok: false},
		{name: "not at a label", qname: "xcorp.example.", ok: false},
		{name: "escaped dot not a boundary", qname: `a\.corp.example.`, ok: false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := Meant(tc.qname, podSearch)
			if got != tc.want || ok != tc.ok {
				t.Errorf("Meant(%q) = %q, %v; want %q, %v", tc.qname, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestDecideSearch(t *testing.T) {
	cfg := stripe
	cfg.DenyResponse = Refused
	cfg.Rules = append(cfg.Rules[:len(cfg.Rules):len(cfg.Rules)],
		Rule{Pattern: "*.corp.example", Action: Deny},     // 2
		Rule{Pattern: "wiki.corp.example", Action: Allow}, // 3
	)
	p := mustNew(t, cfg)
	nx, refused := uint16(dns.RcodeNameError), uint16(dns.RcodeRefused)
	search := []string{"demo.svc.cluster.local", "svc.cluster.local", "cluster.local", "node.example"}
	tests := []struct {
		name      string
		qname     string
		fromTable bool
		want      Decision
	}{
		// glibc with ndots:5 asks api.stripe.com under each search domain
		// before api.stripe.com itself.
		{name: "cluster expansion from the table", qname: "api.stripe.com.demo.svc.cluster.local.", fromTable: true, want: Decision{Action: Allow, Rule: NoRule}},
		{name: "node domain expansion of an allowed name", qname: "api.stripe.com.node.example.", want: Decision{Action: Allow, Rule: 0, Expansion: true}},
		{name: "node domain expansion of a denied name", qname: "evil.com.node.example.", want: Decision{Action: Deny, Rule: NoRule, Rcode: nx, Expansion: true}},
		{name: "the name as written", qname: "evil.com.", want: Decision{Action: Deny, Rule: NoRule, Rcode: refused}},
		{name: "short name of a table name", qname: "web.demo.svc.cluster.local.", fromTable: true, want: Decision{Action: Allow, Rule: NoRule}},
		{name: "rule on the name as written wins", qname: "wiki.corp.example.", want: Decision{Action: Allow, Rule: 3}},
		{name: "outside name not under search", qname: "x.s3.amazonaws.com.", want: Decision{Action: Allow, Rule: 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := p.DecideSearch(tc.qname, tc.fromTable, search)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DecideSearch(%q) (-want +got):\n%s", tc.qname, diff)
			}
		})
	}
	// A rule denying under a search domain answers NXDOMAIN, not REFUSED.
	search2 := append(search, "corp.example")
	got := p.DecideSearch("secret.corp.example.", false, search2)
	want := Decision{Action: Deny, Rule: 2, Rcode: nx}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("denied under a search domain (-want +got):\n%s", diff)
	}
}
