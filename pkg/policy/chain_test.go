package policy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

func cname(owner, target string) dns.RR {
	return &dns.CNAME{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: 60}, Target: target}
}

func a(owner string) dns.RR {
	rr, _ := dns.NewRR(owner + " 60 IN A 192.0.2.1")
	return rr
}

func TestDecideChain(t *testing.T) {
	p := mustNew(t, Config{
		Rules: []Rule{
			{Pattern: "*.s3.amazonaws.com", Action: Allow}, // 0
			{Pattern: "api.stripe.com", Action: Allow},     // 1
			{Pattern: "*.cdn.example", Action: Allow},      // 2
			{Pattern: "blocked.cdn.example", Action: Deny}, // 3
		},
		OutsideDefault: Deny,
	})
	tests := []struct {
		name     string
		qname    string
		answer   []dns.RR
		want     Decision
		wantName string
	}{
		{name: "no chain", qname: "api.stripe.com.", answer: []dns.RR{a("api.stripe.com.")},
			want: Decision{Action: Allow, Rule: 1}, wantName: "api.stripe.com."},
		{name: "chain stays inside", qname: "b.s3.amazonaws.com.", answer: []dns.RR{cname("b.s3.amazonaws.com.", "x.cdn.example."), cname("X.CDN.example.", "y.s3.amazonaws.com."), a("y.s3.amazonaws.com.")},
			want: Decision{Action: Allow, Rule: 0}, wantName: "b.s3.amazonaws.com."},
		{name: "target leaves", qname: "b.s3.amazonaws.com.", answer: []dns.RR{cname("b.s3.amazonaws.com.", "s3-w.amazonaws.com."), a("s3-w.amazonaws.com.")},
			want: Decision{Action: Deny, Rule: NoRule, Rcode: dns.RcodeNameError}, wantName: "s3-w.amazonaws.com."},
		{name: "second target denied by rule", qname: "api.stripe.com.", answer: []dns.RR{cname("api.stripe.com.", "a.cdn.example."), cname("a.cdn.example.", "blocked.cdn.example."), a("blocked.cdn.example.")},
			want: Decision{Action: Deny, Rule: 3, Rcode: dns.RcodeNameError}, wantName: "blocked.cdn.example."},
		{name: "records off the chain ignored", qname: "api.stripe.com.", answer: []dns.RR{cname("other.example.", "evil.example."), a("api.stripe.com.")},
			want: Decision{Action: Allow, Rule: 1}, wantName: "api.stripe.com."},
		{name: "query name denied", qname: "evil.example.", answer: nil,
			want: Decision{Action: Deny, Rule: NoRule, Rcode: dns.RcodeNameError}, wantName: "evil.example."},
		{name: "loop ends", qname: "a.cdn.example.", answer: []dns.RR{cname("a.cdn.example.", "b.cdn.example."), cname("b.cdn.example.", "a.cdn.example.")},
			want: Decision{Action: Allow, Rule: 2}, wantName: "a.cdn.example."},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, name := p.DecideChain(tc.qname, tc.answer)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("decision (-want +got):\n%s", diff)
			}
			if name != tc.wantName {
				t.Errorf("decided by %q, want %q", name, tc.wantName)
			}
		})
	}
}
