package nametable

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// asciiCase changes the case of the letters of s selected by mask bits
// (bit i mod 64 for byte i); DNS folds ASCII only (RFC 4343).
func asciiCase(s string, mask uint64) string {
	b := []byte(s)
	for i, c := range b {
		if mask&(1<<(uint(i)%64)) == 0 {
			continue
		}
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case c >= 'A' && c <= 'Z':
			b[i] = c - 'A' + 'a'
		}
	}
	return string(b)
}

// checkResult enforces what every Result must satisfy.
func checkResult(t *testing.T, q dns.Question, r Result) {
	t.Helper()
	switch {
	case r.Action == Forward:
		if r.Rcode != 0 || r.Alias != "" || r.Chase != "" || r.Answer != nil || r.Ns != nil || r.Extra != nil {
			t.Fatalf("%v: forward with content: %+v", q, r)
		}
	case r.Rcode == dns.RcodeNameError:
		if len(r.Answer) != 0 || len(r.Ns) != 1 || r.Alias != "" || r.Chase != "" {
			t.Fatalf("%v: NXDOMAIN must carry only the SOA: %+v", q, r)
		}
	case r.Rcode != dns.RcodeSuccess:
		t.Fatalf("%v: rcode %d", q, r.Rcode)
	case r.Chase == "" && len(r.Answer) == 0 && len(r.Ns) != 1:
		t.Fatalf("%v: NODATA without SOA: %+v", q, r)
	}
}

// packs reports whether name is a presentation-form name a question can
// carry.
func packs(name string) bool {
	_, err := dns.PackDomainName(dns.Fqdn(name), make([]byte, 256), 0, nil, false)
	return err == nil
}

// FuzzLookup feeds arbitrary names and types to a table. Seeds: the spec
// examples, search-expanded and alternate names, names at the length
// limit, escapes, empty and dot-only names.
func FuzzLookup(f *testing.F) {
	table := newFixture(f)
	known := table.Names()
	for _, s := range []string{
		"kubernetes.default.svc.cluster.local.",
		"web.",
		"web.demo.demo.svc.cluster.local.",
		"_https._tcp.headless.default.svc.cluster.local",
		"1.0.3.10.in-addr.arpa.",
		"x.apps.example.com.demo.svc.cluster.local.",
		"google.com.demo.svc.cluster.local.",
		strings.Repeat("a.", 127),
		`a\.b.cluster.local.`,
		"",
		".",
		"..",
		".cluster.local",
	} {
		f.Add(s, dns.TypeA, uint(0), uint64(0))
	}
	f.Add("WEB.Demo.", dns.TypeSRV, uint(3), uint64(0xaaaa))
	f.Fuzz(func(t *testing.T, name string, qtype uint16, idx uint, mask uint64) {
		q := dns.Question{Name: name, Qtype: qtype, Qclass: dns.ClassINET}
		r := table.Lookup(q)
		checkResult(t, q, r)
		// Only names a packet can carry reach Lookup from the wire (a
		// question that does not pack, such as an incomplete \DDD escape,
		// is FORMERR before it); for the others the result's shape is all
		// that is checked.
		if r.Action == Answer && packs(name) {
			packResult(t, q, r)
		}

		// Case never changes the outcome.
		q2 := dns.Question{Name: asciiCase(name, mask), Qtype: qtype, Qclass: dns.ClassINET}
		r2 := table.Lookup(q2)
		if r.Action != r2.Action || r.Rcode != r2.Rcode || !strings.EqualFold(r.Alias, r2.Alias) || len(r.Answer) != len(r2.Answer) {
			t.Fatalf("%q and %q differ: %+v vs %+v", name, q2.Name, r, r2)
		}

		// A known name is found however it is cased.
		k := known[idx%uint(len(known))]
		kq := dns.Question{Name: asciiCase(k, mask) + ".", Qtype: qtype, Qclass: dns.ClassINET}
		got := table.Lookup(kq)
		if got.Action != Answer || got.Rcode != dns.RcodeSuccess || got.Alias != "" {
			t.Fatalf("known name %q not found: %+v", kq.Name, got)
		}
		want := table.Lookup(dns.Question{Name: k + ".", Qtype: qtype, Qclass: dns.ClassINET})
		if diff := cmp.Diff(viewOf(want, k), viewOf(got, k)); diff != "" {
			t.Fatalf("%q answers unlike %q (-want +got):\n%s", kq.Name, k, diff)
		}
	})
}

// FuzzNew builds a table from an arbitrary entry (hostname, endpoint
// hostname, port name, alt host, address): New must reject it, or answer its
// hostname and pack every answer for every name it lists.
func FuzzNew(f *testing.F) {
	for _, s := range []string{"a.example.com", "*.example.com", "A.B.", "a..b", "*", "a.*.b", strings.Repeat("x", 64), "_http._tcp.x", "1.0.0.10.in-addr.arpa", "dns-version.cluster.local", strings.Repeat("abcdefghi.", 24) + "com"} {
		f.Add(s, "", "", "", []byte{10, 0, 0, 1})
	}
	f.Add("db.ns.svc.cluster.local", "db-0", "sql", "db.example.com", []byte{10, 0, 0, 2})
	f.Add("db.ns.svc.cluster.local", "", "h", "*.db.example.com", []byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 3})
	f.Add(strings.Repeat("abcdefghi.", 22)+"com", strings.Repeat("e", 20), strings.Repeat("p", 15), "", []byte{10, 0, 0, 3})
	f.Fuzz(func(t *testing.T, host, epHost, portName, alt string, ip []byte) {
		a, ok := netip.AddrFromSlice(ip)
		if !ok {
			a = netip.MustParseAddr("10.0.0.1")
		}
		e := Entry{Hostname: host, IPs: []netip.Addr{a}}
		if alt != "" {
			e.AltHosts = []string{alt}
		}
		if epHost != "" || portName != "" {
			e.IPs = nil
			e.Endpoints = []Endpoint{{Hostname: epHost, IPs: []netip.Addr{a}}}
			e.Ports = []Port{{Name: portName, Port: 80}}
		}
		table, err := New([]Entry{e}, []string{"cluster.local"}, Context{Search: []string{"cluster.local"}})
		if err != nil {
			return
		}
		name := host
		if w, ok := strings.CutPrefix(host, "*."); ok {
			name = "x." + w
		}
		qtype := dns.TypeA
		if !a.Unmap().Is4() {
			qtype = dns.TypeAAAA
		}
		q := dns.Question{Name: dns.Fqdn(name), Qtype: qtype, Qclass: dns.ClassINET}
		if r := table.Lookup(q); r.Action != Answer || len(r.Answer) != 1 {
			t.Fatalf("accepted %+v but answers %+v", e, r)
		}
		for _, n := range table.Names() {
			for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypePTR} {
				q := dns.Question{Name: n + ".", Qtype: qt, Qclass: dns.ClassINET}
				r := table.Lookup(q)
				checkResult(t, q, r)
				if r.Action == Answer {
					packResult(t, q, r)
				}
			}
		}
	})
}
