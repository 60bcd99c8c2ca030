package nametable

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// A Builder fed the entries in another order builds the table New builds:
// the same names, the same answers.
func TestBuilderMatchesNew(t *testing.T) {
	var entries []Entry
	for i := range 50 {
		entries = append(entries, Entry{
			Hostname:  fmt.Sprintf("svc%d.ns%d.svc.cluster.local", i, i%3),
			IPs:       []netip.Addr{netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})},
			ShortName: fmt.Sprintf("svc%d", i), Namespace: fmt.Sprintf("ns%d", i%3),
			Ports: []Port{{Name: "http", Port: 80, Protocol: "TCP"}},
		})
	}
	entries = append(entries, Entry{Hostname: "*.corp.example", IPs: []netip.Addr{netip.MustParseAddr("fd00::1")}})
	zones := []string{"cluster.local"}
	pod := Context{Namespace: "ns0", Search: []string{"ns0.svc.cluster.local", "svc.cluster.local"}}
	want, err := New(entries, zones, pod)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewBuilder(zones, pod, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range slices.Backward(entries) {
		if err := b.Add(&e); err != nil {
			t.Fatal(err)
		}
	}
	got := b.Table()
	if diff := cmp.Diff(want.Names(), got.Names()); diff != "" {
		t.Errorf("names (-New +Builder):\n%s", diff)
	}
	for _, q := range []string{"svc7.ns1.svc.cluster.local.", "svc3", "svc3.ns0.svc.cluster.local.ns0.svc.cluster.local.", "x.corp.example.", "nope.ns0.svc.cluster.local.", "_http._tcp.svc9.ns0.svc.cluster.local."} {
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV} {
			question := dns.Question{Name: dns.Fqdn(q), Qtype: qt, Qclass: dns.ClassINET}
			w, g := want.Lookup(question), got.Lookup(question)
			if diff := cmp.Diff(fmt.Sprint(w), fmt.Sprint(g)); diff != "" {
				t.Errorf("%s %s (-New +Builder):\n%s", q, dns.Type(qt), diff)
			}
		}
	}
	if err := b.Add(&entries[0]); err == nil {
		t.Error("Add after Table succeeded")
	}
	// A name defined twice fails at the second Add.
	b2, _ := NewBuilder(zones, pod, 0)
	if err := b2.Add(&entries[1]); err != nil {
		t.Fatal(err)
	}
	dup := entries[1]
	dup.Hostname = "SVC1.ns1.svc.cluster.local"
	if err := b2.Add(&dup); err == nil {
		t.Error("a duplicate name was added")
	}
}
