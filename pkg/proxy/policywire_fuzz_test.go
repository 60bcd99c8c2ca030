package proxy

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/policy"
)

// FuzzJudgeChain feeds arbitrary upstream replies to the CNAME chain walk
// of a query for outside.s3.amazonaws.com under a policy allowing only
// *.s3.amazonaws.com: it must not panic, and on every reply miekg can
// unpack it must agree with policy.DecideChain on whether the chain is
// denied.
func FuzzJudgeChain(f *testing.F) {
	q := newQuery("outside.s3.amazonaws.com.", dns.TypeA)
	qpkt, err := q.Pack()
	if err != nil {
		f.Fatal(err)
	}
	reply := func(compress bool, rrs ...string) []byte {
		m := new(dns.Msg)
		m.SetReply(q)
		m.Answer = mustRRs(f, rrs...)
		m.Compress = compress
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		return b
	}
	// Seeds: a chain that leaves (compressed and not), one that stays, a
	// loop, records off the chain, no CNAME at all.
	f.Add(reply(true, "outside.s3.amazonaws.com. 60 IN CNAME s3-w.amazonaws.com.", "s3-w.amazonaws.com. 60 IN A 192.0.2.1"))
	f.Add(reply(false, "outside.s3.amazonaws.com. 60 IN CNAME s3-w.amazonaws.com.", "s3-w.amazonaws.com. 60 IN A 192.0.2.1"))
	f.Add(reply(true, "outside.s3.amazonaws.com. 60 IN CNAME b.s3.amazonaws.com.", "b.s3.amazonaws.com. 60 IN A 192.0.2.1"))
	f.Add(reply(true, "outside.s3.amazonaws.com. 60 IN CNAME b.s3.amazonaws.com.", "b.s3.amazonaws.com. 60 IN CNAME outside.s3.amazonaws.com."))
	f.Add(reply(true, "x.example. 60 IN CNAME y.example.", "outside.s3.amazonaws.com. 60 IN A 192.0.2.1"))
	f.Add(reply(true, "outside.s3.amazonaws.com. 60 IN A 192.0.2.1"))
	pol, err := NewPolicy(policy.Config{Rules: []policy.Rule{{Pattern: "*.s3.amazonaws.com", Action: policy.Allow}}, OutsideDefault: policy.Deny}, nil)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, msg []byte) {
		var r request
		if dnswire.ParseQuery(qpkt, &r.Query) != dnswire.ParseOK {
			t.Fatal("query does not parse")
		}
		d := decision{pol: pol}
		if len(msg) < r.QEnd {
			return // the handler answers SERVFAIL before judging
		}
		got := judgeChain(msg, &r, &d)
		m := new(dns.Msg)
		if err := m.Unpack(msg); err != nil || len(m.Question) != 1 || !equalFold(m.Question[0].Name, "outside.s3.amazonaws.com.") {
			return
		}
		dec, _ := pol.p.DecideChain("outside.s3.amazonaws.com.", m.Answer)
		if want := dec.Blocks(); got != want {
			t.Errorf("judgeChain = %v, DecideChain blocks = %v for %v", got, want, m.Answer)
		}
	})
}

func equalFold(a, b string) bool {
	return len(a) == len(b) && dns.CanonicalName(a) == dns.CanonicalName(b)
}
