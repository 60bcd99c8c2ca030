package proxy

import (
	"bytes"
	"net"
	"strings"
	"testing"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// fixedLookuper answers every question with one Result.
type fixedLookuper nametable.Result

func (f fixedLookuper) Lookup(dns.Question) nametable.Result { return nametable.Result(f) }

// TestBuildAnswerPacksLikeMsg: the packed replies, the wire packing and
// the pooled dns.Msg alike, are byte for byte what a fresh dns.Msg with
// copied records packs, for every shape of Result; the shapes a table
// answers with take the wire packing; and a packer used for one reply
// leaves nothing in the next.
func TestBuildAnswerPacksLikeMsg(t *testing.T) {
	const q = "web.demo.svc.cluster.local."
	soa := mustRRs(t, "cluster.local. 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30")
	v4in16 := &dns.A{Hdr: dns.RR_Header{Name: "x.", Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 7}, A: net.ParseIP("10.9.8.7")}
	cases := []struct {
		name  string
		qname string
		qtype uint16
		res   nametable.Result
		msg   bool // packed by dns.Msg, not packWire
	}{
		{name: "one A", qtype: dns.TypeA, res: nametable.Result{Answer: mustRRs(t, "svc.demo.svc.cluster.local. 30 IN A 10.0.0.1")}},
		{name: "three A", qtype: dns.TypeA, res: nametable.Result{Answer: mustRRs(t, "a. 5 IN A 10.0.0.1", "a. 5 IN A 10.0.0.2", "a. 5 IN A 10.0.0.3")}},
		{name: "A in 16 bytes", qtype: dns.TypeA, res: nametable.Result{Answer: []dns.RR{v4in16}}},
		{name: "AAAA", qtype: dns.TypeAAAA, res: nametable.Result{Answer: mustRRs(t, "a. 30 IN AAAA fd00::1", "a. 30 IN AAAA fd00::2")}},
		{name: "mixed A and AAAA", qtype: dns.TypeANY, res: nametable.Result{Answer: mustRRs(t, "a. 30 IN A 10.0.0.1", "a. 60 IN AAAA fd00::1")}},
		{name: "short name", qname: "localhost.", qtype: dns.TypeA, res: nametable.Result{Answer: mustRRs(t, "localhost. 30 IN A 127.0.0.1")}},
		{name: "root", qname: ".", qtype: dns.TypeA, res: nametable.Result{Answer: mustRRs(t, ". 30 IN A 127.0.0.1")}},
		{name: "upper-case alias", qtype: dns.TypeA, res: nametable.Result{Alias: "Target.Demo.svc.cluster.local", Answer: mustRRs(t, "t. 30 IN A 10.0.0.5")}, msg: true},
		{name: "search-expanded", qname: "web.other.demo.svc.cluster.local.", qtype: dns.TypeA,
			res: nametable.Result{Alias: "web.other.svc.cluster.local", Answer: mustRRs(t, "t. 30 IN A 10.0.0.5", "t. 30 IN A 10.0.0.6")}},
		{name: "alias with its dot", qname: "web.other.demo.svc.cluster.local.", qtype: dns.TypeA,
			res: nametable.Result{Alias: "web.other.svc.cluster.local.", Answer: mustRRs(t, "t. 30 IN A 10.0.0.5")}},
		{name: "alias sharing nothing", qname: "a.example.", qtype: dns.TypeAAAA,
			res: nametable.Result{Alias: "b.test", Answer: mustRRs(t, "t. 30 IN AAAA fd00::5")}},
		{name: "alias to itself", qtype: dns.TypeA, res: nametable.Result{Alias: "web.demo.svc.cluster.local", Answer: mustRRs(t, "t. 30 IN A 10.0.0.5")}},
		{name: "search-expanded nodata", qname: "web.other.demo.svc.cluster.local.", qtype: dns.TypeAAAA,
			res: nametable.Result{Alias: "web.other.svc.cluster.local", Ns: soa}},
		{name: "search-expanded SRV", qname: "_http._tcp.web.other.demo.svc.cluster.local.", qtype: dns.TypeSRV,
			res: nametable.Result{Alias: "_http._tcp.web.other.svc.cluster.local",
				Answer: mustRRs(t, "x. 30 IN SRV 0 100 80 web.other.svc.cluster.local."),
				Extra:  mustRRs(t, "web.other.svc.cluster.local. 30 IN A 10.0.0.7")}},
		{name: "PTR", qname: "1.0.0.10.in-addr.arpa.", qtype: dns.TypePTR,
			res: nametable.Result{Answer: mustRRs(t, "x. 30 IN PTR web.demo.svc.cluster.local.", "x. 30 IN PTR web2.demo.svc.cluster.local.")}},
		{name: "chain of two", qname: "ext.demo.svc.cluster.local.", qtype: dns.TypeA, res: nametable.Result{
			Answer: mustRRs(t, "x. 30 IN CNAME mid.demo.svc.cluster.local."),
			Chain:  mustRRs(t, "mid.demo.svc.cluster.local. 20 IN CNAME end.other.svc.cluster.local.", "end.other.svc.cluster.local. 10 IN A 10.0.0.9")}},
		{name: "chain to nxdomain", qname: "ext.demo.svc.cluster.local.", qtype: dns.TypeA, res: nametable.Result{Rcode: dns.RcodeNameError,
			Answer: mustRRs(t, "x. 30 IN CNAME gone.demo.svc.cluster.local."), Ns: soa}},
		{name: "MX and NS", qtype: dns.TypeANY, res: nametable.Result{Answer: mustRRs(t, "x. 30 IN MX 10 mail.demo.svc.cluster.local."),
			Ns: mustRRs(t, "demo.svc.cluster.local. 30 IN NS ns.demo.svc.cluster.local.")}},
		{name: "TXT", qtype: dns.TypeTXT, res: nametable.Result{Answer: mustRRs(t, `x. 30 IN TXT "v=1"`)}, msg: true},
		{name: "escaped record name", qtype: dns.TypeA, res: nametable.Result{Rcode: dns.RcodeNameError,
			Ns: mustRRs(t, `we\.ird.cluster.local. 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30`)}, msg: true},
		{name: "upper-case record names", qtype: dns.TypeA, res: nametable.Result{Rcode: dns.RcodeNameError,
			Ns: mustRRs(t, "Cluster.Local. 30 IN SOA ns.dns.cluster.local. hostmaster.Cluster.Local. 1 7200 1800 86400 30")}},
		{name: "chain", qtype: dns.TypeA, res: nametable.Result{Answer: mustRRs(t, "a. 30 IN CNAME b.demo.svc.cluster.local."), Chain: mustRRs(t, "b.demo.svc.cluster.local. 30 IN A 10.0.0.6")}},
		{name: "SRV with extra", qtype: dns.TypeSRV, res: nametable.Result{
			Answer: mustRRs(t, "a. 30 IN SRV 0 100 80 web.demo.svc.cluster.local."),
			Extra:  mustRRs(t, "web.demo.svc.cluster.local. 30 IN A 10.0.0.7")}},
		{name: "nodata", qtype: dns.TypeTXT, res: nametable.Result{Ns: soa}},
		{name: "nxdomain", qtype: dns.TypeA, res: nametable.Result{Rcode: dns.RcodeNameError, Ns: soa}},
	}
	p := &dnswire.Packer{} // empty: the buffer must grow
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
			if _, ok := p.PackWire(ptr(sections(tc.res)), qname, tc.qtype, dns.ClassINET); ok == tc.msg {
				t.Errorf("packWire ok = %v, want %v", ok, !tc.msg)
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
	p := &dnswire.Packer{}
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := buildAnswer(tbl, p, "web.demo.svc.cluster.local.", dns.TypeA, dns.ClassINET); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 0 {
		t.Errorf("%v allocations per first answer, want 0", allocs)
	}
}

// FuzzPackWire: whatever names a Result carries, a reply packWire takes is
// byte for byte the one dns.Msg packs (same compression pointers), and a
// Result dns.Msg refuses is never taken. The names go to every place a
// name can be: question, alias, CNAME chain, SRV target, SOA.
func FuzzPackWire(f *testing.F) {
	// The shapes a table answers with: search-expanded, NODATA behind an
	// alias, authoritative NXDOMAIN, an ExternalName chain.
	f.Add("svc1.ns1.ns0.svc.cluster.local.", "svc1.ns1.svc.cluster.local", "cluster.local.", "ns.dns.cluster.local.", uint16(dns.TypeA), uint8(0))
	f.Add("svc1.ns1.ns0.svc.cluster.local.", "svc1.ns1.svc.cluster.local.", "cluster.local.", "hostmaster.cluster.local.", uint16(dns.TypeAAAA), uint8(1))
	f.Add("host1.example.com.ns5.svc.cluster.local.", "", "cluster.local.", "ns.dns.cluster.local.", uint16(dns.TypeA), uint8(2))
	f.Add("ext.ns0.svc.cluster.local.", "", "ns0.svc.cluster.local.", "db.example.org.", uint16(dns.TypeA), uint8(3))
	// Names dns.Msg refuses or spells its own way.
	f.Add("a..b.", "", "cluster.local.", "x.", uint16(dns.TypeA), uint8(2))
	f.Add(`a\.b.cluster.local.`, "X.Cluster.Local", "cluster.local", "x", uint16(dns.TypeA), uint8(0))
	f.Add(".", ".", ".", ".", uint16(dns.TypeSRV), uint8(3))
	f.Fuzz(func(t *testing.T, qname, alias, zone, target string, qtype uint16, shape uint8) {
		hdr := func(name string, rrtype uint16) dns.RR_Header {
			return dns.RR_Header{Name: name, Rrtype: rrtype, Class: dns.ClassINET, Ttl: 30}
		}
		soa := &dns.SOA{Hdr: hdr(zone, dns.TypeSOA), Ns: target, Mbox: "hostmaster." + zone, Serial: 1, Minttl: 30}
		a := &dns.A{Hdr: hdr("x.", dns.TypeA), A: net.IPv4(10, 0, 0, 1).To4()}
		res := nametable.Result{Action: nametable.Answer, Alias: alias}
		switch shape % 4 {
		case 0:
			res.Answer = []dns.RR{a, &dns.AAAA{Hdr: hdr("x.", dns.TypeAAAA), AAAA: net.ParseIP("fd00::1")}}
		case 1:
			res.Ns = []dns.RR{soa}
		case 2:
			res.Rcode, res.Ns = dns.RcodeNameError, []dns.RR{soa}
		case 3:
			res.Answer = []dns.RR{&dns.CNAME{Hdr: hdr("x.", dns.TypeCNAME), Target: target}}
			res.Chain = []dns.RR{&dns.SRV{Hdr: hdr(target, dns.TypeSRV), Port: 80, Target: zone}, &dns.PTR{Hdr: hdr(zone, dns.TypePTR), Ptr: qname}}
			res.Extra = []dns.RR{&dns.A{Hdr: hdr(zone, dns.TypeA), A: a.A}}
		}
		p := &dnswire.Packer{}
		got, ok := p.PackWire(ptr(sections(res)), qname, qtype, dns.ClassINET)
		m := new(dns.Msg)
		m.Response, m.Authoritative, m.RecursionAvailable = true, true, true
		m.Rcode, m.Compress = res.Rcode, true
		m.Question = []dns.Question{{Name: qname, Qtype: qtype, Qclass: dns.ClassINET}}
		m.Answer = append(resultAnswer(res, qname), res.Chain...)
		m.Ns, m.Extra = res.Ns, res.Extra
		want, err := m.Pack()
		switch {
		case ok && err != nil:
			t.Fatalf("packWire took a Result dns.Msg refuses (%v): %x", err, got)
		case ok && !bytes.Equal(got, want):
			t.Fatalf("packWire\n%x\ndns.Msg\n%x", got, want)
		}
	})
}

// TestQuestionName: a question name is spelt as dns.UnpackDomainName
// spells it, or left to it (ok false) when it needs an escape.
func TestQuestionName(t *testing.T) {
	tests := []struct {
		name string
		wire []byte
		ok   bool
	}{
		{name: "service", wire: []byte("\x03web\x04demo\x03svc\x07cluster\x05local\x00"), ok: true},
		{name: "port name", wire: []byte("\x05_http\x04_tcp\x03web\x00"), ok: true},
		{name: "root", wire: []byte{0}, ok: true},
		{name: "space", wire: []byte("\x03a b\x05local\x00")},
		{name: "dot in a label", wire: []byte("\x03a.b\x05local\x00")},
		{name: "non-ASCII", wire: []byte("\x02\xc3\xa9\x05local\x00")},
		{name: "NUL", wire: []byte("\x01\x00\x05local\x00")},
		{name: "longest", wire: append(bytes.Repeat([]byte("\x3f"+strings.Repeat("a", 63)), 3), append([]byte("\x3d"), append([]byte(strings.Repeat("b", 61)), 0)...)...), ok: true},
	}
	p := &dnswire.Packer{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := p.QuestionName(tc.wire)
			if ok != tc.ok {
				t.Fatalf("ok = %v, want %v (%q)", ok, tc.ok, got)
			}
			want, _, err := dns.UnpackDomainName(tc.wire, 0)
			if err != nil {
				t.Fatal(err)
			}
			if ok && got != want {
				t.Errorf("got %q, want %q", got, want)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
