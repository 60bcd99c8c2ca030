package nametable

import (
	"testing"

	"github.com/miekg/dns"
)

// packResult builds the reply a server writes for r (the Result contract:
// CNAME to Alias, Answer owned by Alias or the question, CNAME to Chase),
// packs it and unpacks it again, so every precomputed record is proven to
// be valid on the wire.
func packResult(tb testing.TB, q dns.Question, r Result) *dns.Msg {
	tb.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(q.Name), q.Qtype)
	m.Response, m.Authoritative, m.Rcode = true, true, r.Rcode
	owner := dns.Fqdn(q.Name)
	if r.Alias != "" {
		m.Answer = append(m.Answer, &dns.CNAME{Hdr: header(owner, dns.TypeCNAME, 30), Target: r.Alias})
		owner = r.Alias
	}
	for _, rr := range r.Answer {
		c := dns.Copy(rr)
		c.Header().Name = owner
		m.Answer = append(m.Answer, c)
	}
	if r.Chase != "" {
		m.Answer = append(m.Answer, &dns.CNAME{Hdr: header(owner, dns.TypeCNAME, 30), Target: r.Chase})
	}
	m.Ns, m.Extra = r.Ns, r.Extra
	wire, err := m.Pack()
	if err != nil {
		tb.Fatalf("%s %s: pack %+v: %v", q.Name, dns.TypeToString[q.Qtype], r, err)
	}
	back := new(dns.Msg)
	if err := back.Unpack(wire); err != nil {
		tb.Fatalf("%s %s: unpack: %v", q.Name, dns.TypeToString[q.Qtype], err)
	}
	if len(back.Answer) != len(m.Answer) || len(back.Ns) != len(m.Ns) || len(back.Extra) != len(m.Extra) {
		tb.Fatalf("%s %s: sections changed on the wire: %v", q.Name, dns.TypeToString[q.Qtype], back)
	}
	return back
}

// TestResultsPack packs the answer to every name the fixture table knows,
// as written, as alternate names and behind every search domain, for
// every type the table answers and one it does not.
func TestResultsPack(t *testing.T) {
	table := newFixture(t)
	_, _, pod := fixture()
	names := []string{"web", "web.demo", "web.demo.svc", "_http._tcp.web.demo", "my-pet.headless.default"}
	for _, n := range table.Names() {
		names = append(names, n)
		for _, s := range pod.Search {
			if len(n)+len(s)+1 <= maxName {
				names = append(names, n+"."+s)
			}
		}
	}
	types := []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypePTR, dns.TypeTXT, dns.TypeSOA, dns.TypeANY, dns.TypeMX}
	answered := 0
	for _, n := range names {
		for _, qt := range types {
			q := dns.Question{Name: dns.Fqdn(n), Qtype: qt, Qclass: dns.ClassINET}
			r := table.Lookup(q)
			if r.Action != Answer {
				continue
			}
			packResult(t, q, r)
			answered++
		}
	}
	if answered < len(names) {
		t.Errorf("only %d answers for %d names", answered, len(names))
	}
}
