package nametable

import (
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/miekg/dns"
)

func TestNewRejects(t *testing.T) {
	long := strings.Repeat("a", 64)
	tooLongName := strings.Repeat("abcdefghi.", 25) + "comx" // 254 characters
	ip := addrs("10.0.0.1")
	tests := []struct {
		name    string
		entries []Entry
		zones   []string
		pod     Context
		wantErr string
	}{
		{name: "empty hostname", entries: []Entry{{IPs: ip}}, wantErr: "empty name"},
		{name: "empty label", entries: []Entry{{Hostname: "a..b", IPs: ip}}, wantErr: "empty label"},
		{name: "space in a label", entries: []Entry{{Hostname: "a b.com", IPs: ip}}, wantErr: "not allowed"},
		{name: "label starting with a hyphen", entries: []Entry{{Hostname: "-a.com", IPs: ip}}, wantErr: "starts or ends with '-'"},
		{name: "label ending with a hyphen", entries: []Entry{{Hostname: "a.b-.com", IPs: ip}}, wantErr: "starts or ends with '-'"},
		{name: "label longer than 63", entries: []Entry{{Hostname: long + ".com", IPs: ip}}, wantErr: "longer than 63"},
		{name: "name longer than 253", entries: []Entry{{Hostname: tooLongName, IPs: ip}}, wantErr: "longer than 253"},
		{name: "wildcard not leading", entries: []Entry{{Hostname: "a.*.example.com", IPs: ip}}, wantErr: "only as the first label"},
		{name: "wildcard glued to a label", entries: []Entry{{Hostname: "*a.example.com", IPs: ip}}, wantErr: "not allowed"},
		{name: "bare wildcard", entries: []Entry{{Hostname: "*", IPs: ip}}, wantErr: "needs a domain"},
		{name: "wildcard with ports", entries: []Entry{{Hostname: "*.example.com", IPs: ip, Ports: []Port{{Name: "http", Port: 80}}}}, wantErr: "wildcard cannot have ports"},
		{name: "invalid IP", entries: []Entry{{Hostname: "a.com", IPs: []netip.Addr{{}}}}, wantErr: "invalid IP"},
		{name: "zoned IP", entries: []Entry{{Hostname: "a.com", IPs: addrs("fe80::1%eth0")}}, wantErr: "zoned"},
		{name: "canonical name with IPs", entries: []Entry{{Hostname: "a.com", IPs: ip, CanonicalName: "b.com"}}, wantErr: "canonical name together with IPs"},
		{name: "bad canonical name", entries: []Entry{{Hostname: "a.com", CanonicalName: "b..com"}}, wantErr: "canonical name"},
		{name: "bad alt host", entries: []Entry{{Hostname: "a.com", IPs: ip, AltHosts: []string{"b!.com"}}}, wantErr: "alt host"},
		{name: "duplicate hostname in another case", entries: []Entry{{Hostname: "a.com", IPs: ip}, {Hostname: "A.com.", IPs: ip}}, wantErr: `already defined by entry "a.com"`},
		{name: "alt host duplicates a hostname", entries: []Entry{{Hostname: "a.com", IPs: ip}, {Hostname: "b.com", IPs: ip, AltHosts: []string{"a.com"}}}, wantErr: "already defined"},
		{name: "hostname duplicates an endpoint", entries: []Entry{{Hostname: "s.com", Endpoints: []Endpoint{{Hostname: "p", IPs: ip}}}, {Hostname: "p.s.com", IPs: ip}}, wantErr: `already defined by entry "s.com"`},
		{name: "hostname duplicates an alt host's endpoint", entries: []Entry{{Hostname: "s.com", AltHosts: []string{"t.com"}, Endpoints: []Endpoint{{Hostname: "p", IPs: ip}}}, {Hostname: "p.t.com", IPs: ip}}, wantErr: `already defined by entry "s.com"`},
		{name: "hostname duplicates an entry's own subdomain", entries: []Entry{{Hostname: "s.com", IPs: ip}, {Hostname: "p.s.com", IPs: ip}, {Hostname: "P.s.com", IPs: ip}}, wantErr: `already defined by entry "p.s.com"`},
		{name: "duplicate wildcard", entries: []Entry{{Hostname: "*.a.com", IPs: ip}, {Hostname: "*.A.com", IPs: ip}}, wantErr: "already defined"},
		{name: "port zero", entries: []Entry{{Hostname: "a.com", IPs: ip, Ports: []Port{{Name: "http"}}}}, wantErr: "number 0"},
		{name: "protocol folding to sctp only in Unicode", entries: []Entry{{Hostname: "a.com", IPs: ip, Ports: []Port{{Name: "x", Port: 80, Protocol: "ſctp"}}}}, wantErr: "unknown protocol"},
		{name: "unknown protocol", entries: []Entry{{Hostname: "a.com", IPs: ip, Ports: []Port{{Name: "http", Port: 80, Protocol: "QUIC"}}}}, wantErr: "unknown protocol"},
		{name: "bad port name", entries: []Entry{{Hostname: "a.com", IPs: ip, Ports: []Port{{Name: "h.ttp", Port: 80}}}}, wantErr: `port "h.ttp"`},
		{name: "bad endpoint hostname", entries: []Entry{{Hostname: "a.com", Endpoints: []Endpoint{{Hostname: "x.y", IPs: ip}}}}, wantErr: "endpoint hostname"},
		{name: "endpoint without IPs", entries: []Entry{{Hostname: "a.com", Endpoints: []Endpoint{{Hostname: "x"}}}}, wantErr: "no IPs"},
		{name: "generated endpoint name too long", entries: []Entry{{Hostname: strings.Repeat("abcdefghi.", 24) + "com", Endpoints: []Endpoint{{Hostname: "abcdefghijklmnop", IPs: ip}}}}, wantErr: "longer than 253"},
		{name: "bad zone", zones: []string{"cluster..local"}, wantErr: "zone"},
		{name: "bad cluster domain", pod: Context{ClusterDomain: "-bad domain"}, wantErr: "cluster domain"},
		{name: "namespace with a dot", pod: Context{Namespace: "a.b"}, wantErr: "namespace"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.entries, tc.zones, tc.pod)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("New() error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestNewAccepts(t *testing.T) {
	q := func(name string, qtype uint16) dns.Question {
		return dns.Question{Name: name, Qtype: qtype, Qclass: dns.ClassINET}
	}
	tests := []struct {
		name    string
		entries []Entry
		zones   []string
		pod     Context
		q       dns.Question
		want    []string // answer section as zone-file text
		// wantRcode is the expected rcode (NOERROR unless set).
		wantRcode int
	}{
		{
			name:    "a trailing dot on hostnames is tolerated",
			entries: []Entry{{Hostname: "a.example.com.", IPs: addrs("10.0.0.1")}},
			q:       q("a.example.com.", dns.TypeA),
			want:    []string{"a.example.com. 30 IN A 10.0.0.1"},
		},
		{
			name:    "repeated addresses answer once",
			entries: []Entry{{Hostname: "a.example.com", IPs: addrs("10.0.0.1", "10.0.0.1")}},
			q:       q("a.example.com.", dns.TypeA),
			want:    []string{"a.example.com. 30 IN A 10.0.0.1"},
		},
		{
			name:    "IPv4-mapped IPv6 answers as A",
			entries: []Entry{{Hostname: "a.example.com", IPs: addrs("::ffff:10.0.0.1")}},
			q:       q("a.example.com.", dns.TypeA),
			want:    []string{"a.example.com. 30 IN A 10.0.0.1"},
		},
		{
			name:    "context TTL applies to entries without one",
			entries: []Entry{{Hostname: "a.example.com", IPs: addrs("10.0.0.1")}},
			pod:     Context{TTL: 7},
			q:       q("a.example.com.", dns.TypeA),
			want:    []string{"a.example.com. 7 IN A 10.0.0.1"},
		},
		{
			name:  "SOA serial and minimum follow the context",
			zones: []string{"Example.COM."},
			pod:   Context{TTL: 12, Serial: 42},
			q:     q("example.com.", dns.TypeSOA),
			want:  []string{"example.com. 12 IN SOA ns.dns.example.com. hostmaster.example.com. 42 7200 1800 86400 12"},
		},
		{
			name: "two entries with one address both get a PTR",
			entries: []Entry{
				{Hostname: "a.example.com", IPs: addrs("10.0.0.1")},
				{Hostname: "b.example.com", IPs: addrs("10.0.0.1")},
			},
			q:    q("1.0.0.10.in-addr.arpa.", dns.TypePTR),
			want: []string{"1.0.0.10.in-addr.arpa. 30 IN PTR a.example.com.", "1.0.0.10.in-addr.arpa. 30 IN PTR b.example.com."},
		},
		{
			// The reverse name is stored (an alt host) and indexed: the
			// node it shares with the hostname answers PTR, as it did
			// when PTR records were precomputed into it.
			name: "an alt host named like a reverse name answers PTR on every name of its entry",
			entries: []Entry{
				{Hostname: "a.example.com", IPs: addrs("10.0.0.1")},
				{Hostname: "b.example.com", IPs: addrs("10.0.0.2"), AltHosts: []string{"1.0.0.10.in-addr.arpa"}},
			},
			q:    q("b.example.com.", dns.TypePTR),
			want: []string{"b.example.com. 30 IN PTR a.example.com."},
		},
		{
			name: "dual-stack endpoint hostnames merge",
			entries: []Entry{{
				Hostname: "db.ns.svc.cluster.local", ShortName: "db", Namespace: "ns",
				Endpoints: []Endpoint{{Hostname: "db-0", IPs: addrs("10.0.0.1")}, {Hostname: "db-0", IPs: addrs("fd00::1")}},
			}},
			q:    q("db-0.db.ns.svc.cluster.local.", dns.TypeAAAA),
			want: []string{"db-0.db.ns.svc.cluster.local. 30 IN AAAA fd00::1"},
		},
		{
			name: "a dual-stack endpoint without hostname gets a dashed name per address",
			entries: []Entry{{
				Hostname: "db.ns.svc.cluster.local", ShortName: "db", Namespace: "ns",
				Endpoints: []Endpoint{{IPs: addrs("10.0.0.1", "fd00::1")}},
			}},
			q:    q("fd00--1.db.ns.svc.cluster.local.", dns.TypeAAAA),
			want: []string{"fd00--1.db.ns.svc.cluster.local. 30 IN AAAA fd00::1"},
		},
		{
			name: "a dual-stack endpoint without hostname is one SRV target per address",
			entries: []Entry{{
				Hostname: "db.ns.svc.cluster.local", ShortName: "db", Namespace: "ns",
				Endpoints: []Endpoint{{IPs: addrs("10.0.0.1", "fd00::1")}},
				Ports:     []Port{{Name: "sql", Port: 5432}},
			}},
			q: q("_sql._tcp.db.ns.svc.cluster.local.", dns.TypeSRV),
			want: []string{
				"_sql._tcp.db.ns.svc.cluster.local. 30 IN SRV 0 50 5432 10-0-0-1.db.ns.svc.cluster.local.",
				"_sql._tcp.db.ns.svc.cluster.local. 30 IN SRV 0 50 5432 fd00--1.db.ns.svc.cluster.local.",
			},
		},
		{
			name:    "a custom cluster domain moves the alternate names",
			entries: []Entry{{Hostname: "web.ns.svc.corp.example", ShortName: "web", Namespace: "ns", IPs: addrs("10.0.0.1")}},
			pod:     Context{ClusterDomain: "corp.example."},
			q:       q("web.ns.svc.", dns.TypeA),
			want:    []string{"web.ns.svc. 30 IN A 10.0.0.1"},
		},
		{
			name: "dns-version follows the cluster domain",
			pod:  Context{ClusterDomain: "corp.example"},
			q:    q("dns-version.corp.example.", dns.TypeTXT),
			want: []string{`dns-version.corp.example. 3600 IN TXT "1.1.0"`},
		},
		{
			name:    "an entry may take over a zone apex and keeps the SOA",
			entries: []Entry{{Hostname: "example.com", IPs: addrs("10.0.0.1")}},
			zones:   []string{"example.com"},
			q:       q("example.com.", dns.TypeSOA),
			want:    []string{"example.com. 30 IN SOA ns.dns.example.com. hostmaster.example.com. 1 7200 1800 86400 30"},
		},
		{
			name: "a port name listed twice answers with both ports",
			entries: []Entry{{
				Hostname: "web.example.com", IPs: addrs("10.0.0.1"),
				Ports: []Port{{Name: "http", Port: 80}, {Name: "grpc", Port: 90}, {Name: "HTTP", Port: 81, Protocol: "tcp"}},
			}},
			q:    q("_http._tcp.web.example.com.", dns.TypeSRV),
			want: []string{"_http._tcp.web.example.com. 30 IN SRV 0 50 80 web.example.com.", "_http._tcp.web.example.com. 30 IN SRV 0 50 81 web.example.com."},
		},
		{
			name:      "a headless service without endpoints has no SRV records",
			entries:   []Entry{{Hostname: "db.ns.svc.cluster.local", ShortName: "db", Namespace: "ns", Ports: []Port{{Name: "sql", Port: 5432}}}},
			zones:     []string{"cluster.local"},
			q:         q("_sql._tcp.db.ns.svc.cluster.local.", dns.TypeSRV),
			wantRcode: dns.RcodeNameError,
		},
		{
			// Kubernetes DNS specification 2.4.1, and CoreDNS: NXDOMAIN,
			// as for its SRV names.
			name:      "a headless service without ready endpoints is NXDOMAIN",
			entries:   []Entry{{Hostname: "db.ns.svc.cluster.local", ShortName: "db", Namespace: "ns", Ports: []Port{{Name: "sql", Port: 5432}}}},
			zones:     []string{"cluster.local"},
			q:         q("db.ns.svc.cluster.local.", dns.TypeA),
			wantRcode: dns.RcodeNameError,
		},
		{
			name: "alt hosts answer SRV on their port names",
			entries: []Entry{{
				Hostname: "web.example.com", IPs: addrs("10.0.0.1"), AltHosts: []string{"www.example.com"},
				Ports: []Port{{Name: "http", Port: 80}},
			}},
			q:    q("_http._tcp.www.example.com.", dns.TypeSRV),
			want: []string{"_http._tcp.www.example.com. 30 IN SRV 0 100 80 web.example.com."},
		},
		{
			name: "a ClusterIP service with endpoints keeps its own address",
			entries: []Entry{{
				Hostname: "web.ns.svc.cluster.local", IPs: addrs("10.0.0.1"),
				Endpoints: []Endpoint{{Hostname: "web-0", IPs: addrs("10.1.0.1")}},
			}},
			q:    q("web.ns.svc.cluster.local.", dns.TypeA),
			want: []string{"web.ns.svc.cluster.local. 30 IN A 10.0.0.1"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			table, err := New(tc.entries, tc.zones, tc.pod)
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			r := table.Lookup(tc.q)
			if r.Action != Answer || r.Rcode != tc.wantRcode {
				t.Fatalf("Lookup(%s) = %+v, want an answer with rcode %s", tc.q.Name, r, dns.RcodeToString[tc.wantRcode])
			}
			got := viewOf(r, tc.q.Name).Answer
			if diff := cmp.Diff(rrs(t, tc.want...), got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("answer mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

// TestSearchDomainsCostNoMemory checks that search-path expansion is worked
// out at query time: the stored names do not grow with the search list.
func TestSearchDomainsCostNoMemory(t *testing.T) {
	entries, zones, pod := fixture()
	one := pod
	one.Search = pod.Search[:1]
	many := pod
	many.Search = append([]string{"a.cluster.local", "b.cluster.local", "c.example"}, pod.Search...)
	t1, err := New(entries, zones, one)
	if err != nil {
		t.Fatal(err)
	}
	t2, err := New(entries, zones, many)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(t1.Names(), t2.Names()); diff != "" {
		t.Errorf("stored names depend on the search list (-1 domain +7 domains):\n%s", diff)
	}
	// And the expansion still works under the added domains inside a
	// zone, and never under those outside every zone.
	r := t2.Lookup(dns.Question{Name: "web.demo.b.cluster.local.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	if r.Alias != "web.demo.svc.cluster.local." || len(r.Answer) != 1 {
		t.Errorf("web.demo.b.cluster.local: got %+v, want alias to web.demo.svc.cluster.local.", r)
	}
	if r := t2.Lookup(dns.Question{Name: "web.demo.c.example.", Qtype: dns.TypeA, Qclass: dns.ClassINET}); r.Action != Forward {
		t.Errorf("web.demo.c.example: got %+v, want Forward (not a zone of the table)", r)
	}
}

func TestUnusableSearchDomainsAreSkipped(t *testing.T) {
	table, err := New(nil, nil, Context{Search: []string{".", "a..b", "Svc.Cluster.Local.", "svc.cluster.local"}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if diff := cmp.Diff([]string{"svc.cluster.local"}, table.Context().Search); diff != "" {
		t.Errorf("search list mismatch (-want +got):\n%s", diff)
	}
}

func TestNames(t *testing.T) {
	table, err := New([]Entry{
		{Hostname: "web.ns.svc.cluster.local", ShortName: "web", Namespace: "ns", IPs: addrs("10.0.0.1"), Ports: []Port{{Name: "http", Port: 80}}},
		{Hostname: "*.example.com", IPs: addrs("10.0.0.2")},
	}, []string{"cluster.local"}, Context{Namespace: "ns", Search: []string{"ns.svc.cluster.local"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"*.example.com",
		"1.0.0.10.in-addr.arpa",
		"_http._tcp.web.ns.svc.cluster.local",
		"_tcp.web.ns.svc.cluster.local",
		"cluster.local",
		"dns-version.cluster.local",
		"ns.svc.cluster.local",
		"svc.cluster.local",
		"web.ns.svc.cluster.local",
	}
	if diff := cmp.Diff(want, table.Names()); diff != "" {
		t.Errorf("Names() mismatch (-want +got):\n%s", diff)
	}
	// Len counts stored names only; the two SRV names are derived.
	if table.Len() != len(want)-2 {
		t.Errorf("Len() = %d, want %d", table.Len(), len(want)-2)
	}
	if diff := cmp.Diff([]string{"cluster.local"}, table.Zones()); diff != "" {
		t.Errorf("Zones() mismatch (-want +got):\n%s", diff)
	}
	wantPod := Context{Namespace: "ns", ClusterDomain: "cluster.local", Search: []string{"ns.svc.cluster.local"}, TTL: 30, Serial: 1}
	if diff := cmp.Diff(wantPod, table.Context()); diff != "" {
		t.Errorf("Context() mismatch (-want +got):\n%s", diff)
	}
}

// TestResultSlicesAreIsolated checks that a caller appending to a returned
// slice cannot change what the next lookup returns.
func TestResultSlicesAreIsolated(t *testing.T) {
	table := newFixture(t)
	q := dns.Question{Name: "web.demo.svc.cluster.local.", Qtype: dns.TypeA, Qclass: dns.ClassINET}
	r := table.Lookup(q)
	_ = append(r.Answer, &dns.A{Hdr: dns.RR_Header{Name: "evil.", Rrtype: dns.TypeA, Class: dns.ClassINET}})
	aaaa := table.Lookup(dns.Question{Name: q.Name, Qtype: dns.TypeAAAA, Qclass: dns.ClassINET})
	if len(aaaa.Answer) != 1 || aaaa.Answer[0].Header().Rrtype != dns.TypeAAAA {
		t.Errorf("AAAA answer changed after an append to the A answer: %v", aaaa.Answer)
	}
}

// TestConcurrentLookupsAndSwaps runs lookups while another goroutine swaps
// tables the way the agent does (atomic.Pointer); with -race it proves a
// Table is safe to share and a swap never blocks readers.
func TestConcurrentLookupsAndSwaps(t *testing.T) {
	tables := make([]*Table, 20)
	for i := range tables {
		tables[i] = newFixture(t)
	}
	var cur atomic.Pointer[Table]
	cur.Store(tables[0])
	// The swapper runs until the readers are done; readers do a fixed
	// number of lookups so the test is bounded in time.
	done := make(chan struct{})
	swapped := make(chan int)
	go func() {
		for n := 1; ; n++ {
			cur.Store(tables[n%len(tables)])
			select {
			case <-done:
				swapped <- n
				return
			default:
			}
		}
	}()
	names := []string{"web.demo.svc.cluster.local.", "web.", "web.demo.demo.svc.cluster.local.", "nope.cluster.local.", "x.apps.example.com."}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 5000; i++ {
				r := cur.Load().Lookup(dns.Question{Name: names[i%len(names)], Qtype: dns.TypeA, Qclass: dns.ClassINET})
				if r.Action != Answer {
					t.Errorf("%s: forwarded", names[i%len(names)])
					return
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	t.Logf("%d table swaps during %d lookups", <-swapped, 4*5000)
}

// TestNodeSize keeps the per-name cost in check: a table holds a node
// per stored name, cut from chunks of 16-byte nodes.
func TestNodeSize(t *testing.T) {
	if got := unsafe.Sizeof(node{}); got != 16 {
		t.Errorf("node is %d bytes, want 16", got)
	}
}

// TestEndpointsOfOneEntryOnly checks that a service's endpoints answer
// with their own addresses only, whatever the entries added before them
// had (the builder reuses their scratch from entry to entry).
func TestEndpointsOfOneEntryOnly(t *testing.T) {
	entries := []Entry{
		{Hostname: "a.ns.svc.cluster.local", Endpoints: []Endpoint{
			{Hostname: "p", IPs: addrs("10.0.0.1", "10.0.0.2")}, {Hostname: "q", IPs: addrs("10.0.0.3")}, {IPs: addrs("10.0.0.4")}}},
		{Hostname: "b.ns.svc.cluster.local", Endpoints: []Endpoint{{Hostname: "q", IPs: addrs("10.0.1.1")}}},
		{Hostname: "c.ns.svc.cluster.local", Endpoints: []Endpoint{{Hostname: "p", IPs: addrs("10.0.2.1")}, {Hostname: "P", IPs: addrs("10.0.2.2")}}},
	}
	tbl, err := New(entries, []string{"cluster.local"}, Context{})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]string{
		"p.a.ns.svc.cluster.local.":        {"10.0.0.1", "10.0.0.2"},
		"q.a.ns.svc.cluster.local.":        {"10.0.0.3"},
		"10-0-0-4.a.ns.svc.cluster.local.": {"10.0.0.4"},
		"q.b.ns.svc.cluster.local.":        {"10.0.1.1"},
		"b.ns.svc.cluster.local.":          {"10.0.1.1"},
		"p.c.ns.svc.cluster.local.":        {"10.0.2.1", "10.0.2.2"},
	} {
		var lines []string
		for _, a := range want {
			lines = append(lines, name+" 30 IN A "+a)
		}
		got := viewOf(tbl.Lookup(dns.Question{Name: name, Qtype: dns.TypeA, Qclass: dns.ClassINET}), name).Answer
		if !slices.Equal(got, rrs(t, lines...)) {
			t.Errorf("%s A = %v, want %v", name, got, want)
		}
	}
}
