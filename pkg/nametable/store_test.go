package nametable

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// TestLargeTableAnswersEveryName builds a table past every chunk and index
// boundary (thousands of nodes, names over many 64 KiB text chunks, a
// record run longer than a record chunk, an index grown many times) and
// asks every name for its own records, its reverse name and an unknown
// neighbour.
func TestLargeTableAnswersEveryName(t *testing.T) {
	const services, endpoints = 6000, 5000
	var entries []Entry
	for i := range services {
		ns := fmt.Sprintf("ns-%d", i%13)
		entries = append(entries, Entry{
			Hostname:  fmt.Sprintf("svc-%d.%s.svc.cluster.local", i, ns),
			ShortName: fmt.Sprintf("svc-%d", i), Namespace: ns,
			IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}), netip.AddrFrom16([16]byte{0xfd, 14: byte(i >> 8), 15: byte(i)})},
		})
	}
	big := Entry{Hostname: "big.ns-0.svc.cluster.local", ShortName: "big", Namespace: "ns-0"}
	for j := range endpoints {
		big.Endpoints = append(big.Endpoints, Endpoint{IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 244, byte(j >> 8), byte(j)})}})
	}
	entries = append(entries, big)
	table, err := New(entries, []string{"cluster.local", "in-addr.arpa"}, Context{Namespace: "ns-0"})
	if err != nil {
		t.Fatal(err)
	}
	if nodes, rrs, text := table.st.Chunks(); text < 3 || nodes < 5 || rrs < 5 {
		t.Fatalf("table too small to cross chunks: %d text, %d node, %d record chunks", text, nodes, rrs)
	}
	lookup := func(name string, qtype uint16) Result {
		return table.Lookup(dns.Question{Name: name, Qtype: qtype, Qclass: dns.ClassINET})
	}
	for i := range services {
		e := entries[i]
		fqdn := e.Hostname + "."
		for qtype, want := range map[uint16]string{
			dns.TypeA:    e.IPs[0].String(),
			dns.TypeAAAA: e.IPs[1].String(),
		} {
			r := lookup(fqdn, qtype)
			if len(r.Answer) != 1 || !strings.HasSuffix(r.Answer[0].String(), "\t"+want) {
				t.Fatalf("%s %s: %v, want %s", fqdn, dns.TypeToString[qtype], r.Answer, want)
			}
		}
		rev := reverseName(e.IPs[0])
		if r := lookup(rev, dns.TypePTR); len(r.Answer) != 1 || r.Answer[0].(*dns.PTR).Ptr != fqdn {
			t.Fatalf("%s PTR: %v, want %s", rev, r.Answer, fqdn)
		}
		if r := lookup("x"+fqdn, dns.TypeA); r.Rcode != dns.RcodeNameError {
			t.Fatalf("x%s: rcode %d, want NXDOMAIN", fqdn, r.Rcode)
		}
	}
	if r := lookup("big.ns-0.svc.cluster.local.", dns.TypeA); len(r.Answer) != endpoints {
		t.Errorf("headless service: %d A records, want %d", len(r.Answer), endpoints)
	}
	if r := lookup("10-244-19-135.big.", dns.TypeA); len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "10.244.19.135" {
		t.Errorf("endpoint 10-244-19-135: %v", r.Answer)
	}
	// Every stored name once, plus the ENTs (one per namespace) and the
	// zone apex's children, and the reverse names.
	if got, want := table.Len(), services+endpoints+1+13+1+1+2*services+endpoints; got < want {
		t.Errorf("Len() = %d, want at least %d", got, want)
	}
}

// TestManyShapes exercises the shapes past the 16-bit index: every
// service with ports of its own has a shape of its own.
func TestManyShapes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 66,000 services")
	}
	const services = bigShape + 500
	b, err := NewBuilder([]string{"cluster.local"}, Context{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := range services {
		e := Entry{
			Hostname: fmt.Sprintf("svc-%d.example.com", i),
			IPs:      []netip.Addr{netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})},
			Ports:    []Port{{Name: "p", Port: uint16(i%65535 + 1)}, {Name: "q", Port: uint16(i / 65535)}},
		}
		if e.Ports[1].Port == 0 {
			e.Ports = e.Ports[:1]
		}
		if err := b.Add(&e); err != nil {
			t.Fatal(err)
		}
	}
	table := b.Table()
	if len(table.bigShape) == 0 {
		t.Fatalf("%d shapes, none past the index", len(table.shapes))
	}
	for _, i := range []int{0, 1, bigShape - 2, bigShape - 1, bigShape, services - 1} {
		name := fmt.Sprintf("_p._tcp.svc-%d.example.com.", i)
		r := table.Lookup(dns.Question{Name: name, Qtype: dns.TypeSRV, Qclass: dns.ClassINET})
		if len(r.Answer) != 1 || r.Answer[0].(*dns.SRV).Port != uint16(i%65535+1) {
			t.Errorf("%s SRV: %v, want port %d", name, r.Answer, i%65535+1)
		}
	}
}

// TestLimits checks the errors of the limits the node's counters set.
func TestLimits(t *testing.T) {
	// A headless service answers with every endpoint's address.
	headless := func(n int) Entry {
		e := Entry{Hostname: "db.example.com"}
		for i := range n {
			e.Endpoints = append(e.Endpoints, Endpoint{IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})}})
		}
		return e
	}
	if _, err := New([]Entry{headless(maxRecords + 1)}, nil, Context{}); err == nil || !strings.Contains(err.Error(), "more than 65535") {
		t.Errorf("%d addresses: error %v", maxRecords+1, err)
	}
	if _, err := New([]Entry{headless(maxRecords)}, nil, Context{}); err != nil {
		t.Errorf("%d addresses: %v", maxRecords, err)
	}
	var zones, alts []string
	for i := range maxTail + 1 {
		zones = append(zones, fmt.Sprintf("z%d.example", i))
		alts = append(alts, zones[i])
	}
	e := Entry{Hostname: "a.example.com", IPs: []netip.Addr{netip.MustParseAddr("10.0.0.1")}, AltHosts: alts}
	if _, err := New([]Entry{e}, zones, Context{}); err == nil || !strings.Contains(err.Error(), "apex of more than") {
		t.Errorf("%d zone apexes: error %v", len(zones), err)
	}
	e.AltHosts = alts[:maxTail]
	table, err := New([]Entry{e}, zones, Context{})
	if err != nil {
		t.Fatalf("%d zone apexes: %v", maxTail, err)
	}
	r := table.Lookup(dns.Question{Name: "z0.example.", Qtype: dns.TypeSOA, Qclass: dns.ClassINET})
	if diff := cmp.Diff(maxTail, len(r.Answer)); diff != "" {
		t.Errorf("SOA records of an entry over %d apexes (-want +got):\n%s", maxTail, diff)
	}
}
