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
		Rule{Pattern: "*.wild.example", Action: Allow},    // 4
	)
	p := mustNew(t, cfg)
	// The pod writes its own search list: evil.test is one no rule allows.
	search := []string{"demo.svc.cluster.local", "svc.cluster.local", "cluster.local", "node.example", "corp.example", "evil.test"}
	tests := []struct {
		name      string
		qname     string
		fromTable bool
		want      Decision
	}{
		// glibc with ndots:5 asks api.stripe.com under each search domain
		// before api.stripe.com itself.
		{name: "cluster expansion from the table", qname: "api.stripe.com.demo.svc.cluster.local.", fromTable: true, want: allowed(NoRule)},
		{name: "expansion of an allowed name is judged as written", qname: "api.stripe.com.node.example.", want: deniedNX(NoRule)},
		{name: "expansion of a denied name", qname: "evil.com.node.example.", want: deniedNX(NoRule)},
		{name: "the name as written", qname: "evil.com.", want: Decision{Action: Deny, Rule: NoRule, Rcode: dns.RcodeRefused}},
		{name: "the allowed name as written", qname: "api.stripe.com.", want: allowed(0)},
		{name: "short name of a table name", qname: "web.demo.svc.cluster.local.", fromTable: true, want: allowed(NoRule)},
		{name: "rule on the name as written allows", qname: "wiki.corp.example.", want: allowed(3)},
		{name: "rule on the name as written denies", qname: "secret.corp.example.", want: deniedNX(2)},
		{name: "outside name not under search", qname: "x.s3.amazonaws.com.", want: allowed(1)},
		// The tunnel: data in labels under an allowed wildcard, written
		// under a search domain no rule allows, never leaves.
		{name: "tunnel under an allowed wildcard", qname: "secret-data-0001.wild.example.evil.test.", want: deniedNX(NoRule)},
		{name: "tunnel under an allowed exact name", qname: "api.stripe.com.Evil.Test", want: deniedNX(NoRule)},
		{name: "allowed wildcard, written as itself", qname: "secret-data-0001.wild.example.", want: allowed(4)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := p.DecideSearch(tc.qname, tc.fromTable, search)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DecideSearch(%q) (-want +got):\n%s", tc.qname, diff)
			}
		})
	}
}

// Under an outside default that allows, the name the pod meant may still
// deny an expansion, so a denied name is denied at every step of the
// walk; it never allows one that the name as written does not.
func TestDecideSearchMeantDenies(t *testing.T) {
	p := mustNew(t, Config{Rules: []Rule{
		{Pattern: "evil.com", Action: Deny},               // 0
		{Pattern: "*.tunnel.example", Action: Deny},       // 1
		{Pattern: "evil.com.corp.example", Action: Allow}, // 2
		{Pattern: "*.corp.example", Action: Deny},         // 3
		{Pattern: "x.corp.example", Action: Allow},        // 4
	}})
	search := []string{"svc.cluster.local", "corp.example", "node.example"}
	tests := []struct {
		name  string
		qname string
		want  Decision
	}{
		{name: "meant name denied by a rule", qname: "evil.com.node.example.", want: Decision{Action: Deny, Rule: 0, Rcode: dns.RcodeNameError, Expansion: true}},
		{name: "meant name denied by a wildcard", qname: "a.b.tunnel.example.node.example.", want: Decision{Action: Deny, Rule: 1, Rcode: dns.RcodeNameError, Expansion: true}},
		{name: "meant name allowed", qname: "api.stripe.com.node.example.", want: allowed(NoRule)},
		{name: "a rule on the name as written decides", qname: "evil.com.corp.example.", want: allowed(2)},
		{name: "an allow as written, the meant name has no rule", qname: "x.corp.example.", want: allowed(4)},
		{name: "a deny as written", qname: "bad.com.corp.example.", want: deniedNX(3)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := p.DecideSearch(tc.qname, false, search)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("DecideSearch(%q) (-want +got):\n%s", tc.qname, diff)
			}
		})
	}
}

func allowed(rule int32) Decision { return Decision{Action: Allow, Rule: rule} }

func deniedNX(rule int32) Decision {
	return Decision{Action: Deny, Rule: rule, Rcode: dns.RcodeNameError}
}
