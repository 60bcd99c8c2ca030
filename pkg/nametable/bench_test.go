package nametable

import (
	"fmt"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/miekg/dns"
)

// The scale the table is sized for: 100,000 services with 2 named ports each,
// plus 1,000 headless services of 10 endpoints.
const (
	benchServices   = 100_000
	benchHeadless   = 1_000
	benchEndpoints  = 10
	benchNamespaces = 100
)

// bigEntries builds the benchmark cluster: services svc-N.ns-M with a
// ClusterIP from 10.96.0.0/12, headless services whose endpoints have
// hostnames for even indexes (StatefulSets) and dashed names otherwise.
func bigEntries() []Entry {
	entries := make([]Entry, 0, benchServices+benchHeadless)
	ports := []Port{{Name: "http", Port: 80, Protocol: "TCP"}, {Name: "grpc", Port: 9090, Protocol: "TCP"}}
	for i := range benchServices {
		ns := fmt.Sprintf("ns-%d", i%benchNamespaces)
		svc := fmt.Sprintf("svc-%d", i)
		ip := netip.AddrFrom4([4]byte{10, byte(96 + i>>16), byte(i >> 8), byte(i)})
		entries = append(entries, Entry{
			Hostname: svc + "." + ns + ".svc.cluster.local", Registry: "Kubernetes",
			ShortName: svc, Namespace: ns, IPs: []netip.Addr{ip}, Ports: ports,
		})
	}
	for i := range benchHeadless {
		ns := fmt.Sprintf("ns-%d", i%benchNamespaces)
		svc := fmt.Sprintf("headless-%d", i)
		eps := make([]Endpoint, 0, benchEndpoints)
		for j := range benchEndpoints {
			n := i*benchEndpoints + j
			ep := Endpoint{IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 244, byte(n >> 8), byte(n)})}}
			if i%2 == 0 {
				ep.Hostname = fmt.Sprintf("%s-%d", svc, j)
			}
			eps = append(eps, ep)
		}
		entries = append(entries, Entry{
			Hostname: svc + "." + ns + ".svc.cluster.local", Registry: "Kubernetes",
			ShortName: svc, Namespace: ns, Endpoints: eps, Ports: ports,
		})
	}
	return entries
}

var (
	bigZones = []string{"cluster.local", "10.in-addr.arpa"}
	bigPod   = Context{
		Namespace: "ns-7",
		Search:    []string{"ns-7.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example.com", "example.com"},
	}
)

var bigTable = sync.OnceValues(func() (*Table, error) { return New(bigEntries(), bigZones, bigPod) })

// BenchmarkNew builds the large table and reports the heap the table
// retains per service (runtime.MemStats.HeapAlloc after GC, the entries
// themselves excluded) and the build time per service, as wall time and
// as process CPU time (garbage collection included). The two search
// lists show that search-path expansion costs no memory: heap-B/service
// must be the same for 5 and 25 search domains.
func BenchmarkNew(b *testing.B) {
	entries := bigEntries()
	many := slices.Clone(bigPod.Search)
	for i := range 20 {
		many = append(many, fmt.Sprintf("extra-%d.example.org", i))
	}
	for _, bc := range []struct {
		name   string
		search []string
	}{
		{name: "search=5", search: bigPod.Search},
		{name: "search=25", search: many},
	} {
		b.Run(bc.name, func(b *testing.B) {
			pod := bigPod
			pod.Search = bc.search
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			var t *Table
			b.ReportAllocs()
			cpu0, ok := testenv.ProcessCPUTime()
			for b.Loop() {
				var err error
				if t, err = New(entries, bigZones, pod); err != nil {
					b.Fatal(err)
				}
			}
			if cpu1, ok2 := testenv.ProcessCPUTime(); ok && ok2 {
				b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/float64(b.N)/float64(benchServices+benchHeadless), "cpu-ns/service")
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			services := float64(benchServices + benchHeadless)
			b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/services, "heap-B/service")
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/services, "build-ns/service")
			b.ReportMetric(float64(t.Len()), "names")
			runtime.KeepAlive(t)
		})
	}
	runtime.KeepAlive(entries)
}

// BenchmarkLookup measures the hot path on the large table; every case
// must report 0 allocs/op but srv and ptr, whose records are built per
// question (the proxy packs each answer once per table and caches it).
func BenchmarkLookup(b *testing.B) {
	t, err := bigTable()
	if err != nil {
		b.Fatal(err)
	}
	cases := []struct {
		name  string
		qname string
		qtype uint16
		want  Result // only Action, Rcode and whether Alias is set are checked
	}{
		{name: "known", qname: "svc-12345.ns-45.svc.cluster.local.", qtype: dns.TypeA, want: Result{Action: Answer}},
		{name: "known-mixed-case", qname: "SVC-12345.Ns-45.svc.Cluster.Local.", qtype: dns.TypeA, want: Result{Action: Answer}},
		{name: "alternate-svc.ns", qname: "svc-12345.ns-45.", qtype: dns.TypeA, want: Result{Action: Answer}},
		{name: "alternate-bare", qname: "svc-7.", qtype: dns.TypeA, want: Result{Action: Answer}},
		{name: "search-expanded", qname: "svc-12345.ns-45.ns-7.svc.cluster.local.", qtype: dns.TypeA, want: Result{Action: Answer, Alias: "x"}},
		{name: "search-expanded-last-domain", qname: "svc-12345.ns-45.cluster.local.", qtype: dns.TypeA, want: Result{Action: Answer, Alias: "x"}},
		{name: "srv", qname: "_http._tcp.svc-12345.ns-45.svc.cluster.local.", qtype: dns.TypeSRV, want: Result{Action: Answer}},
		{name: "ptr", qname: "57.48.96.10.in-addr.arpa.", qtype: dns.TypePTR, want: Result{Action: Answer}},
		{name: "nodata", qname: "svc-12345.ns-45.svc.cluster.local.", qtype: dns.TypeAAAA, want: Result{Action: Answer}},
		{name: "nxdomain", qname: "google.com.ns-7.svc.cluster.local.", qtype: dns.TypeA, want: Result{Action: Answer, Rcode: dns.RcodeNameError}},
		{name: "forward", qname: "www.google.com.", qtype: dns.TypeA, want: Result{Action: Forward}},
	}
	for _, c := range cases {
		q := dns.Question{Name: c.qname, Qtype: c.qtype, Qclass: dns.ClassINET}
		r := t.Lookup(q)
		if r.Action != c.want.Action || r.Rcode != c.want.Rcode || (r.Alias != "") != (c.want.Alias != "") {
			b.Fatalf("%s: Lookup(%s) = %+v, want %+v", c.name, c.qname, r, c.want)
		}
		b.Run(c.name, func(b *testing.B) {
			// One OS thread for the whole loop, so its CPU clock is
			// the loop's CPU time.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			start, ok := testenv.ThreadCPUTime()
			for b.Loop() {
				t.Lookup(q)
			}
			if end, ok2 := testenv.ThreadCPUTime(); ok && ok2 {
				b.ReportMetric(float64((end-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
			}
		})
	}
}

// TestLookupAllocatesNothing pins the 0 allocs/op of the benchmark in a
// test, so a change that allocates on the hot path fails CI. SRV and PTR
// answers are built per question and allocate (the proxy caches packed
// answers per table); finding their names and answering other types on
// them does not.
func TestLookupAllocatesNothing(t *testing.T) {
	table := newFixture(t)
	for _, c := range []struct {
		name  string
		qtype uint16
	}{
		{"kubernetes.default.svc.cluster.local.", dns.TypeA},      // known
		{"KUBERNETES.default.svc.cluster.local.", dns.TypeA},      // known, other case
		{"web.demo.", dns.TypeA},                                  // alternate name
		{"web.", dns.TypeA},                                       // bare alternate name
		{"web.demo.demo.svc.cluster.local.", dns.TypeA},           // search-expanded
		{"x.apps.example.com.demo.svc.cluster.local.", dns.TypeA}, // search-expanded wildcard
		{"x.apps.example.com.", dns.TypeA},                        // wildcard
		{"kubernetes.default.svc.cluster.local.", dns.TypeAAAA},   // NODATA
		{"_http._tcp.web.demo.svc.cluster.local.", dns.TypeA},     // SRV port name, NODATA
		{"_tcp.web.demo.svc.cluster.local.", dns.TypeSRV},         // protocol label
		{"1.0.3.10.in-addr.arpa.", dns.TypeA},                     // reverse name, NODATA
		{"nope.demo.svc.cluster.local.", dns.TypeA},               // NXDOMAIN
		{"google.com.", dns.TypeA},                                // forward
	} {
		q := dns.Question{Name: c.name, Qtype: c.qtype, Qclass: dns.ClassINET}
		if table.Lookup(q).Action != Answer && c.name != "google.com." {
			t.Errorf("Lookup(%s): not answered", c.name)
		}
		if n := testing.AllocsPerRun(100, func() { table.Lookup(q) }); n != 0 {
			t.Errorf("Lookup(%s %s): %v allocs/op, want 0", c.name, dns.TypeToString[c.qtype], n)
		}
	}
}
