package policy

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// stripe is the README's worked example: api.stripe.com and S3 buckets,
// nothing else outside; cluster names keep working.
var stripe = Config{
	Rules: []Rule{
		{Pattern: "api.stripe.com", Action: Allow},
		{Pattern: "*.s3.amazonaws.com.", Action: Allow},
	},
	OutsideDefault: Deny,
}

func mustNew(t testing.TB, cfg Config) *Policy {
	t.Helper()
	p, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDecide(t *testing.T) {
	layered := Config{Rules: []Rule{
		{Pattern: "*.example.com", Action: Deny},             // 0
		{Pattern: "*.ok.example.com", Action: Allow},         // 1
		{Pattern: "api.example.com", Action: Allow},          // 2
		{Pattern: "bad.ok.example.com", Action: Deny},        // 3
		{Pattern: "Twice.Example.Org", Action: Allow},        // 4
		{Pattern: "twice.example.org.", Action: Deny},        // 5: deny wins over 4
		{Pattern: "twice.example.org", Action: Deny},         // 6: 5 came first
		{Pattern: "*.evil.com", Action: Deny},                // 7
		{Pattern: "*.svc.cluster.local", Action: Deny},       // 8
		{Pattern: "web.ns.svc.cluster.local", Action: Allow}, // 9
	}}
	tests := []struct {
		name      string
		cfg       Config
		qname     string
		fromTable bool
		want      Decision
	}{
		{name: "exact allowed", cfg: stripe, qname: "api.stripe.com.", want: Decision{Action: Allow, Rule: 0}},
		{name: "exact any case no dot", cfg: stripe, qname: "API.Stripe.COM", want: Decision{Action: Allow, Rule: 0}},
		{name: "sibling denied by default", cfg: stripe, qname: "www.stripe.com.", want: Decision{Action: Deny, Rule: NoRule, Rcode: dns.RcodeNameError}},
		{name: "wildcard below", cfg: stripe, qname: "bucket.s3.amazonaws.com.", want: Decision{Action: Allow, Rule: 1}},
		{name: "wildcard deep", cfg: stripe, qname: "a.b.S3.amazonaws.com.", want: Decision{Action: Allow, Rule: 1}},
		{name: "wildcard not its domain", cfg: stripe, qname: "s3.amazonaws.com.", want: Decision{Action: Deny, Rule: NoRule, Rcode: dns.RcodeNameError}},
		{name: "suffix not at a label", cfg: stripe, qname: "evils3.amazonaws.com.", want: Decision{Action: Deny, Rule: NoRule, Rcode: dns.RcodeNameError}},
		{name: "table default allows", cfg: stripe, qname: "web.ns.svc.cluster.local.", fromTable: true, want: Decision{Action: Allow, Rule: NoRule}},
		{name: "root", cfg: stripe, qname: ".", want: Decision{Action: Deny, Rule: NoRule, Rcode: dns.RcodeNameError}},
		{name: "longer wildcard wins", cfg: layered, qname: "x.ok.example.com.", want: Decision{Action: Allow, Rule: 1}},
		{name: "shorter wildcard", cfg: layered, qname: "x.example.com.", want: Decision{Action: Deny, Rule: 0, Rcode: dns.RcodeNameError}},
		{name: "exact beats wildcard", cfg: layered, qname: "api.example.com.", want: Decision{Action: Allow, Rule: 2}},
		{name: "exact deny under allowed wildcard", cfg: layered, qname: "bad.ok.example.com.", want: Decision{Action: Deny, Rule: 3, Rcode: dns.RcodeNameError}},
		{name: "below exact is wildcard's", cfg: layered, qname: "x.bad.ok.example.com.", want: Decision{Action: Allow, Rule: 1}},
		{name: "deny beats allow same pattern", cfg: layered, qname: "twice.example.org.", want: Decision{Action: Deny, Rule: 5, Rcode: dns.RcodeNameError}},
		{name: "escaped dot is inside a label", cfg: layered, qname: `a\.b.evil.com.`, want: Decision{Action: Deny, Rule: 7, Rcode: dns.RcodeNameError}},
		{name: "escaped name longer than 256", cfg: layered, qname: strings.Repeat(`\000`, 60) + "." + strings.Repeat(`\255`, 10) + ".evil.com.", want: Decision{Action: Deny, Rule: 7, Rcode: dns.RcodeNameError}},
		{name: "escaped dot not a boundary", cfg: layered, qname: `x.a\.evil.com.`, want: Decision{Action: Allow, Rule: NoRule}},
		{name: "rule governs table names", cfg: layered, qname: "db.ns.svc.cluster.local.", fromTable: true, want: Decision{Action: Deny, Rule: 8, Rcode: dns.RcodeNameError}},
		{name: "exact table name allowed", cfg: layered, qname: "web.ns.svc.cluster.local.", fromTable: true, want: Decision{Action: Allow, Rule: 9}},
		{name: "refused", cfg: Config{OutsideDefault: Deny, DenyResponse: Refused}, qname: "a.", want: Decision{Action: Deny, Rule: NoRule, Rcode: dns.RcodeRefused}},
		{name: "table default deny", cfg: Config{TableDefault: Deny}, qname: "a.", fromTable: true, want: Decision{Action: Deny, Rule: NoRule, Rcode: dns.RcodeNameError}},
		{name: "audit", cfg: Config{OutsideDefault: Deny, Mode: Audit}, qname: "a.", want: Decision{Action: Deny, Rule: NoRule, Rcode: dns.RcodeNameError, Audit: true}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustNew(t, tc.cfg)
			got := p.Decide(tc.qname, tc.fromTable)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Decide(%q) (-want +got):\n%s", tc.qname, diff)
			}
			if gotB := p.DecideBytes([]byte(tc.qname), tc.fromTable); gotB != got {
				t.Errorf("DecideBytes = %+v, Decide = %+v", gotB, got)
			}
			if want := tc.want.Action == Deny && !tc.want.Audit; got.Blocks() != want {
				t.Errorf("Blocks() = %v, want %v", got.Blocks(), want)
			}
		})
	}
}

func TestNilPolicyAllows(t *testing.T) {
	var p *Policy
	if d := p.Decide("anything.", false); d.Blocks() || d.Rule != NoRule {
		t.Errorf("nil policy: %+v", d)
	}
	if p.Mode() != Enforce || p.Len() != 0 {
		t.Error("nil policy: mode or length")
	}
}

func TestNewRejects(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		want string
	}{
		{name: "empty pattern", cfg: Config{Rules: []Rule{{Pattern: ""}}}, want: `rule 0: invalid pattern "": empty name`},
		{name: "inner wildcard", cfg: Config{Rules: []Rule{{Pattern: "ok.com"}, {Pattern: "a.*.com"}}}, want: `rule 1: invalid pattern "a.*.com"`},
		{name: "bare wildcard", cfg: Config{Rules: []Rule{{Pattern: "*"}}}, want: `wildcard needs a domain`},
		{name: "space", cfg: Config{Rules: []Rule{{Pattern: "a b.com"}}}, want: `not allowed`},
		{name: "action", cfg: Config{Rules: []Rule{{Pattern: "a.com", Action: 7}}}, want: `rule 0: action 7 out of range`},
		{name: "mode", cfg: Config{Mode: 9}, want: `out of range`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New: %v, want an error containing %q", err, tc.want)
			}
			if len(tc.cfg.Rules) > 0 && tc.name != "action" && !errors.Is(err, ErrPattern) {
				t.Errorf("%v does not wrap ErrPattern", err)
			}
		})
	}
}

// rules1000 is 500 exact names and 500 wildcards, denied outside.
func rules1000() Config {
	cfg := Config{OutsideDefault: Deny}
	for i := range 500 {
		cfg.Rules = append(cfg.Rules,
			Rule{Pattern: fmt.Sprintf("host%d.team%d.example.com", i, i%17), Action: Allow},
			Rule{Pattern: fmt.Sprintf("*.bucket%d.storage.example.net", i), Action: Allow})
	}
	return cfg
}

var benchNames = []string{
	"host499.team6.example.com.",                      // exact
	"a.b.c.bucket250.storage.example.net.",            // wildcard, four probes
	"tunnel-0123456789abcdef.data.exfil.example.org.", // denied, every probe misses
	"WEB.Demo.svc.cluster.local.",                     // table name, upper case
}

func TestDecideAllocatesNothing(t *testing.T) {
	p := mustNew(t, rules1000())
	search := []string{"demo.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example"}
	ans := []dns.RR{
		&dns.CNAME{Hdr: dns.RR_Header{Name: "x.bucket1.storage.example.net.", Rrtype: dns.TypeCNAME}, Target: "y.bucket2.storage.example.net."},
	}
	for _, q := range benchNames {
		b := []byte(q)
		if n := testing.AllocsPerRun(100, func() {
			p.Decide(q, false)
			p.DecideBytes(b, true)
			p.DecideSearch(q, false, search)
			p.DecideChain("x.bucket1.storage.example.net.", ans)
		}); n != 0 {
			t.Errorf("%s: %v allocations per decision, want 0", q, n)
		}
	}
}

// BenchmarkDecide1000: one decision against 1,000 rules (make bench-policy
// is not a target; run go test -bench Decide ./pkg/policy).
func BenchmarkDecide1000(b *testing.B) {
	p := mustNew(b, rules1000())
	for _, q := range benchNames {
		b.Run(strings.SplitN(q, ".", 2)[0], func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				p.Decide(q, false)
			}
		})
	}
}

// BenchmarkDecideRules: the cost of a decision does not grow with the
// number of rules (one hash probe per label), so compare 2 and 1,000
// rules in one run.
func BenchmarkDecideRules(b *testing.B) {
	big := rules1000()
	for _, n := range []int{2, 1000} { // 2: one exact rule, one wildcard
		p := mustNew(b, Config{Rules: big.Rules[:n], OutsideDefault: Deny})
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, q := range benchNames {
					p.Decide(q, false)
				}
			}
		})
	}
}

func BenchmarkNew1000(b *testing.B) {
	cfg := rules1000()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := New(cfg); err != nil {
			b.Fatal(err)
		}
	}
}
