package proxy

import (
	"bytes"
	"net"
	"testing"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/nametable"
)

// fixedLookuper answers every question with one Result.
type fixedLookuper nametable.Result

func (f fixedLookuper) Lookup(dns.Question) nametable.Result { return nametable.Result(f) }

// TestBuildAnswerPacksLikeMsg: the packed replies, the direct packing of
// A/AAAA answers and the pooled dns.Msg alike, are byte for byte what a
// fresh dns.Msg with copied records packs, for every shape of Result, and
// a packer used for one reply leaves nothing in the next.
func TestBuildAnswerPacksLikeMsg(t *testing.T) {
	const q = "web.demo.svc.cluster.local."
	soa := mustRRs(t, "cluster.local. 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30")
	v4in16 := &dns.A{Hdr: dns.RR_Header{Name: "x.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 7}, A: net.ParseIP("10.9.8.7")}
	cases := []struct {
		name  string
		qname string
		qtype uint16
		res   nametable.Result
	}{
		{name: "one A", qtype: dns.TypeA, res: nametable.Result{Answer: mustRRs(t, "svc.demo.svc.cluster.local. 30 IN A 10.0.0.1")}},
		{name: "three A", qtype: dns.TypeA, res: nametable.Result{Answer: mustRRs(t, "a. 5 IN A 10.0.0.1", "a. 5 IN A 10.0.0.2", "a. 5 IN A 10.0.0.3")}},
		{name: "A in 16 bytes", qtype: dns.TypeA, res: nametable.Result{Answer: []dns.RR{v4in16}}},
		{name: "AAAA", qtype: dns.TypeAAAA, res: nametable.Result{Answer: mustRRs(t, "a. 30 IN AAAA fd00::1", "a. 30 IN AAAA fd00::2")}},
		{name: "mixed A and AAAA", qtype: dns.TypeANY, res: nametable.Result{Answer: mustRRs(t, "a. 30 IN A 10.0.0.1", "a. 60 IN AAAA fd00::1")}},
		{name: "short name", qname: "localhost.", qtype: dns.TypeA, res: nametable.Result{Answer: mustRRs(t, "localhost. 30 IN A 127.0.0.1")}},
		{name: "root", qname: ".", qtype: dns.TypeA, res: nametable.Result{Answer: mustRRs(t, ". 30 IN A 127.0.0.1")}},
		{name: "alias", qtype: dns.TypeA, res: nametable.Result{Alias: "Target.Demo.svc.cluster.local", Answer: mustRRs(t, "t. 30 IN A 10.0.0.5")}},
		{name: "chain", qtype: dns.TypeA, res: nametable.Result{Answer: mustRRs(t, "a. 30 IN CNAME b.demo.svc.cluster.local."), Chain: mustRRs(t, "b.demo.svc.cluster.local. 30 IN A 10.0.0.6")}},
		{name: "SRV with extra", qtype: dns.TypeSRV, res: nametable.Result{
			Answer: mustRRs(t, "a. 30 IN SRV 0 100 80 web.demo.svc.cluster.local."),
			Extra:  mustRRs(t, "web.demo.svc.cluster.local. 30 IN A 10.0.0.7")}},
		{name: "nodata", qtype: dns.TypeTXT, res: nametable.Result{Ns: soa}},
		{name: "nxdomain", qtype: dns.TypeA, res: nametable.Result{Rcode: dns.RcodeNameError, Ns: soa}},
	}
	p := &packer{buf: make([]byte, 0, 16)} // small: the buffer must grow
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			qname := tc.qname
			if qname == "" {
				qname = q
			}
			tc.res.Action = nametable.Answer
			want := referencePack(t, tc.res, qname, tc.qtype)
			a, err := buildAnswer(fixedLookuper(tc.res), p, qname, tc.qtype, dns.ClassINET)
			if err != nil {
				t.Fatal(err)
			}
			if a.kind != kindPacked || a.rcode != tc.res.Rcode {
				t.Fatalf("kind %d rcode %d", a.kind, a.rcode)
			}
			if !bytes.Equal(a.msg, want) {
				t.Fatalf("packed\n%x\nwant\n%x", a.msg, want)
			}
			if off, size, n := shuffleRun(want); a.shufOff != off || a.shufLen != size || a.shufN != n {
				t.Errorf("run %d/%d/%d, want %d/%d/%d", a.shufOff, a.shufLen, a.shufN, off, size, n)
			}
		})
	}
	// The table's records are never rewritten in place.
	if got := cases[0].res.Answer[0].Header().Name; got != "svc.demo.svc.cluster.local." {
		t.Errorf("the table's record now owned by %q", got)
	}
}

// referencePack is the reply packed the plain way: a new dns.Msg with the
// records copied (resultAnswer).
func referencePack(t *testing.T, res nametable.Result, qname string, qtype uint16) []byte {
	t.Helper()
	m := new(dns.Msg)
	m.Response, m.Authoritative, m.RecursionAvailable = true, true, true
	m.Rcode = res.Rcode
	m.Compress = true
	m.Question = []dns.Question{{Name: qname, Qtype: qtype, Qclass: dns.ClassINET}}
	m.Answer = append(resultAnswer(res, qname), res.Chain...)
	m.Ns, m.Extra = res.Ns, res.Extra
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestBuildAnswerAllocs: the first answer for a name allocates nothing
// once its packer's buffer has grown (the cache's copy aside).
func TestBuildAnswerAllocs(t *testing.T) {
	var tbl Lookuper = fixedLookuper(nametable.Result{Action: nametable.Answer, Answer: mustRRs(t, "a. 30 IN A 10.0.0.1", "a. 30 IN AAAA fd00::1")})
	p := &packer{}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := buildAnswer(tbl, p, "web.demo.svc.cluster.local.", dns.TypeA, dns.ClassINET); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Errorf("%v allocations per first answer, want 0", allocs)
	}
}
