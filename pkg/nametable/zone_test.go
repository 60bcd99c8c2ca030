package nametable

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// zonedService is a headless service with endpoints in zones a and b,
// one without a zone, and one dual-stack hostname in b.
func zonedService(eps ...Endpoint) Entry {
	return Entry{Hostname: "db.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "db", Namespace: "demo",
		Endpoints: eps, Ports: []Port{{Name: "pg", Port: 5432, Protocol: "TCP"}}}
}

var zonedEndpoints = []Endpoint{
	{IPs: addrs("10.0.0.1"), Zone: "a"},
	{IPs: addrs("10.0.0.2"), Zone: "b"},
	{IPs: addrs("10.0.0.3")},
	{Hostname: "db-3", IPs: addrs("10.0.0.4", "fd00::4"), Zone: "b"},
	{IPs: addrs("10.0.0.5"), Zone: "a"},
	{IPs: addrs("fd00::6"), Zone: "a"},
}

// addrsOf returns the addresses of the records, in order.
func addrsOf(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		switch rr := rr.(type) {
		case *dns.A:
			out = append(out, rr.A.String())
		case *dns.AAAA:
			out = append(out, rr.AAAA.String())
		case *dns.SRV:
			out = append(out, rr.Target)
		}
	}
	return out
}

func TestZoneOrdersHeadlessAnswers(t *testing.T) {
	hinted := []Endpoint{
		// Hints win over the zone: 10.0.0.2 in b serves a.
		{IPs: addrs("10.0.0.1"), Zone: "a", ForZones: []string{"c"}},
		{IPs: addrs("10.0.0.2"), Zone: "b", ForZones: []string{"a", "c"}},
		{IPs: addrs("10.0.0.3"), Zone: "a", ForZones: []string{"c"}},
		{IPs: addrs("10.0.0.4"), Zone: "c", ForZones: []string{"a"}},
	}
	tests := []struct {
		name    string
		zone    string
		eps     []Endpoint
		qname   string
		qtype   uint16
		want    []string
		wantLoc int
	}{
		{name: "zone a first, the rest in order", zone: "a", eps: zonedEndpoints, qname: "db.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: []string{"10.0.0.1", "10.0.0.5", "10.0.0.2", "10.0.0.3", "10.0.0.4"}, wantLoc: 2},
		{name: "AAAA counts its own family", zone: "a", eps: zonedEndpoints, qname: "db.demo.svc.cluster.local.", qtype: dns.TypeAAAA,
			want: []string{"fd00::6", "fd00::4"}, wantLoc: 1},
		{name: "a dual-stack hostname in zone b", zone: "b", eps: zonedEndpoints, qname: "db.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: []string{"10.0.0.2", "10.0.0.4", "10.0.0.1", "10.0.0.3", "10.0.0.5"}, wantLoc: 2},
		{name: "alternate name and search path too", zone: "a", eps: zonedEndpoints, qname: "db.", qtype: dns.TypeA,
			want: []string{"10.0.0.1", "10.0.0.5", "10.0.0.2", "10.0.0.3", "10.0.0.4"}, wantLoc: 2},
		{name: "ANY answers A, counted", zone: "a", eps: zonedEndpoints, qname: "db.demo.svc.cluster.local.", qtype: dns.TypeANY,
			want: []string{"10.0.0.1", "10.0.0.5", "10.0.0.2", "10.0.0.3", "10.0.0.4"}, wantLoc: 2},
		{name: "SRV targets in the zone first, no rotation group", zone: "b", eps: zonedEndpoints[:4], qname: "_pg._tcp.db.demo.svc.cluster.local.", qtype: dns.TypeSRV,
			want: []string{"10-0-0-2.db.demo.svc.cluster.local.", "db-3.db.demo.svc.cluster.local.", "10-0-0-1.db.demo.svc.cluster.local.", "10-0-0-3.db.demo.svc.cluster.local."}},
		{name: "an endpoint name is its own", zone: "a", eps: zonedEndpoints, qname: "db-3.db.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: []string{"10.0.0.4"}},
		{name: "hints: for_zones contains the pod's zone", zone: "a", eps: hinted, qname: "db.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: []string{"10.0.0.2", "10.0.0.4", "10.0.0.1", "10.0.0.3"}, wantLoc: 2},
		{name: "fallback: zone unknown", zone: "", eps: zonedEndpoints, qname: "db.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"}},
		{name: "fallback: no endpoint in the zone", zone: "z", eps: zonedEndpoints, qname: "db.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5"}},
		{name: "every endpoint in the zone is one group", zone: "a", eps: []Endpoint{zonedEndpoints[0], zonedEndpoints[4]}, qname: "db.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: []string{"10.0.0.1", "10.0.0.5"}},
		{name: "hints that leave the zone out", zone: "b", eps: hinted, qname: "db.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: []string{"10.0.0.1", "10.0.0.2", "10.0.0.3", "10.0.0.4"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			entries := []Entry{zonedService(tt.eps...)}
			tab, err := New(entries, []string{"cluster.local"}, Context{Namespace: "demo", Zone: tt.zone,
				Search: []string{"demo.svc.cluster.local"}})
			if err != nil {
				t.Fatal(err)
			}
			r := tab.Lookup(dns.Question{Name: tt.qname, Qtype: tt.qtype, Qclass: dns.ClassINET})
			got := addrsOf(append(r.Answer, r.Chain...))
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
			if r.Local != tt.wantLoc {
				t.Errorf("Local = %d, want %d", r.Local, tt.wantLoc)
			}
		})
	}
}

// An ExternalName pointing at a zoned headless service carries its group
// in the chain.
func TestZoneThroughExternalName(t *testing.T) {
	entries := []Entry{zonedService(zonedEndpoints...),
		{Hostname: "alias.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "alias", Namespace: "demo", CanonicalName: "db.demo.svc.cluster.local"}}
	tab, err := New(entries, []string{"cluster.local"}, Context{Namespace: "demo", Zone: "a"})
	if err != nil {
		t.Fatal(err)
	}
	r := tab.Lookup(dns.Question{Name: "alias.demo.svc.cluster.local.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	if diff := cmp.Diff([]string{"10.0.0.1", "10.0.0.5", "10.0.0.2", "10.0.0.3", "10.0.0.4"}, addrsOf(r.Chain)); diff != "" || r.Local != 2 {
		t.Errorf("chain (-want +got):\n%s\nLocal = %d, want 2", diff, r.Local)
	}
}

// A patch orders the services it adds by the table's zone, and drops the
// group of a service whose endpoints left the zone.
func TestZonePatch(t *testing.T) {
	pod := Context{Namespace: "demo", Zone: "a"}
	old := zonedService(zonedEndpoints[1:3]...)
	tab, err := New([]Entry{old}, []string{"cluster.local"}, pod)
	if err != nil {
		t.Fatal(err)
	}
	q := dns.Question{Name: "db.demo.svc.cluster.local.", Qtype: dns.TypeA, Qclass: dns.ClassINET}
	if r := tab.Lookup(q); r.Local != 0 {
		t.Fatalf("before: Local = %d, want 0", r.Local)
	}
	next := zonedService(zonedEndpoints...)
	p, err := tab.Patch([]Entry{old}, []Entry{next})
	if err != nil {
		t.Fatal(err)
	}
	r := p.Lookup(q)
	if diff := cmp.Diff([]string{"10.0.0.1", "10.0.0.5", "10.0.0.2", "10.0.0.3", "10.0.0.4"}, addrsOf(r.Answer)); diff != "" || r.Local != 2 {
		t.Errorf("patched (-want +got):\n%s\nLocal = %d, want 2", diff, r.Local)
	}
	back, err := p.Patch([]Entry{next}, []Entry{old})
	if err != nil {
		t.Fatal(err)
	}
	if r := back.Lookup(q); r.Local != 0 || len(r.Answer) != 2 {
		t.Errorf("patched back: Local = %d with %d records, want 0 with 2", r.Local, len(r.Answer))
	}
}
