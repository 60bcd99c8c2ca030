package proxy

import (
	"context"
	"net"
	"net/netip"
	"os/exec"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/meshdns/meshdns/pkg/nametable"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// startUpstream runs a real DNS server on 127.0.0.1:0 that answers every A
// question with 192.0.2.53 (TTL 60) and counts the questions it got.
func startUpstream(t testing.TB) (addr string, queries *atomic.Int64) {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	queries = new(atomic.Int64)
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		queries.Add(1)
		m := new(dns.Msg)
		m.SetReply(r)
		m.RecursionAvailable = true
		if q := r.Question[0]; q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{
				Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60},
				A:   net.IPv4(192, 0, 2, 53),
			})
		}
		_ = w.WriteMsg(m)
	})}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	go func() { _ = srv.ActivateAndServe() }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown() })
	return pc.LocalAddr().String(), queries
}

func realTable(t testing.TB) *nametable.Table {
	t.Helper()
	addrs := func(ss ...string) []netip.Addr {
		var out []netip.Addr
		for _, s := range ss {
			out = append(out, netip.MustParseAddr(s))
		}
		return out
	}
	tbl, err := nametable.New([]nametable.Entry{
		{
			Hostname: "web.demo.svc.cluster.local", IPs: addrs("10.3.0.10", "10.3.0.11", "fd00::10"),
			Registry: "Kubernetes", ShortName: "web", Namespace: "demo",
			Ports: []nametable.Port{{Name: "http", Port: 80, Protocol: "TCP"}},
		},
		{
			Hostname: "db.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "db", Namespace: "demo",
			CanonicalName: "db.example.org",
		},
		{
			Hostname: "front.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "front", Namespace: "demo",
			CanonicalName: "web.demo.svc.cluster.local", TTL: 7,
		},
		{
			Hostname: "empty.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "empty", Namespace: "demo",
			Ports: []nametable.Port{{Name: "http", Port: 80, Protocol: "TCP"}},
		},
	}, []string{"cluster.local"}, nametable.Context{
		Namespace: "demo",
		Search:    []string{"demo.svc.cluster.local", "svc.cluster.local", "cluster.local"},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

// realStack runs a Server with a real nametable and the real upstream
// Resolver against a real upstream on loopback.
func realStack(t testing.TB) (*Server, *atomic.Int64) {
	t.Helper()
	up, queries := startUpstream(t)
	r, err := upstream.New(upstream.Config{Upstreams: []string{up}, Timeout: time.Second, Registry: newTestRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	s := startServer(t, testConfig(r))
	s.SetTable(realTable(t))
	return s, queries
}

func TestRealStack(t *testing.T) {
	s, queries := realStack(t)
	tests := []struct {
		name         string
		qname        string
		qtype        uint16
		wantRcode    int
		wantAnswer   []string
		wantUpstream int64 // questions the upstream gets for this row
	}{
		{
			name: "service", qname: "web.demo.svc.cluster.local.", qtype: dns.TypeA,
			wantAnswer: []string{"web.demo.svc.cluster.local.\t30\tIN\tA\t10.3.0.10", "web.demo.svc.cluster.local.\t30\tIN\tA\t10.3.0.11"},
		},
		{
			name: "short name", qname: "web.", qtype: dns.TypeA,
			wantAnswer: []string{"web.\t30\tIN\tA\t10.3.0.10", "web.\t30\tIN\tA\t10.3.0.11"},
		},
		{
			name: "search expanded", qname: "web.demo.demo.svc.cluster.local.", qtype: dns.TypeA,
			wantAnswer: []string{
				"web.demo.demo.svc.cluster.local.\t30\tIN\tCNAME\tweb.demo.svc.cluster.local.",
				"web.demo.svc.cluster.local.\t30\tIN\tA\t10.3.0.10", "web.demo.svc.cluster.local.\t30\tIN\tA\t10.3.0.11",
			},
		},
		{
			name: "authoritative nxdomain", qname: "google.com.demo.svc.cluster.local.", qtype: dns.TypeA,
			wantRcode: dns.RcodeNameError,
		},
		{
			name: "forwarded", qname: "www.example.org.", qtype: dns.TypeA, wantUpstream: 1,
			wantAnswer: []string{"www.example.org.\t60\tIN\tA\t192.0.2.53"},
		},
		{
			name: "cache hit", qname: "WWW.example.org.", qtype: dns.TypeA,
			wantAnswer: []string{"WWW.example.org.\t60\tIN\tA\t192.0.2.53"},
		},
		{
			name: "external name chased", qname: "db.demo.svc.cluster.local.", qtype: dns.TypeA, wantUpstream: 1,
			wantAnswer: []string{
				"db.demo.svc.cluster.local.\t30\tIN\tCNAME\tdb.example.org.",
				"db.example.org.\t60\tIN\tA\t192.0.2.53",
			},
		},
		{
			// The target is in the table: answered here, with the entry's
			// TTL on the CNAME, and never asked upstream.
			name: "external name to a service answered locally", qname: "front.demo.svc.cluster.local.", qtype: dns.TypeA,
			wantAnswer: []string{
				"front.demo.svc.cluster.local.\t7\tIN\tCNAME\tweb.demo.svc.cluster.local.",
				"web.demo.svc.cluster.local.\t30\tIN\tA\t10.3.0.10", "web.demo.svc.cluster.local.\t30\tIN\tA\t10.3.0.11",
			},
		},
		{
			name: "pod name synthesized", qname: "10-244-0-9.demo.pod.cluster.local.", qtype: dns.TypeA,
			wantAnswer: []string{"10-244-0-9.demo.pod.cluster.local.\t30\tIN\tA\t10.244.0.9"},
		},
		{
			name: "headless service without endpoints is NXDOMAIN", qname: "empty.demo.svc.cluster.local.", qtype: dns.TypeA,
			wantRcode: dns.RcodeNameError,
		},
		// Bytes no table name holds: inside the zone such a name cannot
		// exist, and the upstream never hears of it.
		{name: "space in the zone is NXDOMAIN", qname: `web\ x.demo.svc.cluster.local.`, qtype: dns.TypeA, wantRcode: dns.RcodeNameError},
		{name: "NUL in the zone is NXDOMAIN", qname: `web\000.demo.svc.cluster.local.`, qtype: dns.TypeA, wantRcode: dns.RcodeNameError},
		{name: "escaped dot in the zone is NXDOMAIN", qname: `web\.demo.svc.cluster.local.`, qtype: dns.TypeA, wantRcode: dns.RcodeNameError},
		{name: "non-ASCII in the zone is NXDOMAIN", qname: `w\195\169b.demo.svc.cluster.local.`, qtype: dns.TypeAAAA, wantRcode: dns.RcodeNameError},
		{
			name: "space outside the zones is forwarded", qname: `a\ b.example.org.`, qtype: dns.TypeA, wantUpstream: 1,
			wantAnswer: []string{`a\ b.example.org.` + "\t60\tIN\tA\t192.0.2.53"},
		},
	}
	for _, tc := range tests {
		for _, network := range []string{"udp", "tcp"} {
			t.Run(network+" "+tc.name, func(t *testing.T) {
				before := queries.Load()
				r := exchange(t, network, map[string]string{"udp": udpAddr(s), "tcp": tcpAddr(s)}[network], newQuery(tc.qname, tc.qtype))
				if r.Rcode != tc.wantRcode {
					t.Errorf("rcode = %s, want %s", dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.wantRcode])
				}
				got := rrStrings(r.Answer)
				sortAddrRuns(got)
				if diff := cmp.Diff(tc.wantAnswer, got); diff != "" {
					t.Errorf("answer (-want +got):\n%s", diff)
				}
				// The upstream is asked once per name: the second network
				// finds the answer in the cache.
				want := tc.wantUpstream
				if network == "tcp" {
					want = 0
				}
				if n := queries.Load() - before; n != want {
					t.Errorf("upstream got %d questions, want %d", n, want)
				}
			})
		}
	}
}

// TestDig checks the server with real resolver tools as clients.
func TestDig(t *testing.T) {
	s, _ := realStack(t)
	host, port, _ := net.SplitHostPort(udpAddr(s))
	tools := []struct {
		tool string
		args []string
	}{
		{tool: "dig", args: []string{"@" + host, "-p", port}},
		{tool: "kdig", args: []string{"@" + host, "-p", port}},
	}
	tests := []struct {
		name  string
		extra []string
		want  []string // substrings of the output
	}{
		{name: "a", extra: []string{"web.demo.svc.cluster.local", "A"}, want: []string{"status: NOERROR", "10.3.0.10", "10.3.0.11"}},
		{name: "tcp", extra: []string{"+tcp", "web.demo.svc.cluster.local", "A"}, want: []string{"status: NOERROR", "10.3.0.10"}},
		{name: "srv", extra: []string{"_http._tcp.web.demo.svc.cluster.local", "SRV"}, want: []string{"status: NOERROR", "80 web.demo.svc.cluster.local."}},
		{name: "nxdomain", extra: []string{"nope.demo.svc.cluster.local", "A"}, want: []string{"status: NXDOMAIN", "SOA"}},
		{name: "forwarded", extra: []string{"www.example.org", "A"}, want: []string{"status: NOERROR", "192.0.2.53"}},
		{name: "edns", extra: []string{"+edns=0", "web.demo.svc.cluster.local", "A"}, want: []string{"version: 0", "1232"}},
	}
	for _, tl := range tools {
		t.Run(tl.tool, func(t *testing.T) {
			path := testenv.RequireTool(t, tl.tool)
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					args := append(append([]string{}, tl.args...), tc.extra...)
					out, err := exec.CommandContext(ctx, path, args...).CombinedOutput()
					if err != nil {
						t.Fatalf("%s %v: %v\n%s", tl.tool, args, err, out)
					}
					for _, w := range tc.want {
						if !strings.Contains(strings.ToLower(string(out)), strings.ToLower(w)) {
							t.Errorf("%s %v: output lacks %q:\n%s", tl.tool, args, w, out)
						}
					}
				})
			}
		})
	}
}

// A table swap under load: queries never fail, and each answer comes whole
// from the old or the new table, never a mix of the two and never an answer
// packed for a table that is no longer current.
func TestSwapUnderLoad(t *testing.T) {
	s, _ := realStack(t)
	web := func(prefix string) *nametable.Table {
		tbl, err := nametable.New([]nametable.Entry{{
			Hostname: "web.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "web", Namespace: "demo",
			IPs: []netip.Addr{netip.MustParseAddr(prefix + ".10"), netip.MustParseAddr(prefix + ".11")},
		}}, []string{"cluster.local"}, nametable.Context{Namespace: "demo"})
		if err != nil {
			t.Fatal(err)
		}
		return tbl
	}
	tables := [2]*nametable.Table{web("10.3.0"), web("10.4.0")}
	want := [2]string{"10.3.0.10 10.3.0.11", "10.4.0.10 10.4.0.11"}
	s.SetTable(tables[0])
	ctx, cancel := context.WithCancel(context.Background())
	swaps := make(chan struct{})
	go func() {
		defer close(swaps)
		for i := 1; ctx.Err() == nil; i++ {
			s.SetTable(tables[i%2])
			time.Sleep(time.Millisecond)
		}
	}()
	var seen [2]int
	for range 300 {
		r := exchange(t, "udp", udpAddr(s), newQuery("web.demo.svc.cluster.local.", dns.TypeA))
		var got []string
		for _, rr := range r.Answer {
			if a, ok := rr.(*dns.A); ok {
				got = append(got, a.A.String())
			}
		}
		sort.Strings(got)
		switch strings.Join(got, " ") {
		case want[0]:
			seen[0]++
		case want[1]:
			seen[1]++
		default:
			t.Fatalf("during swaps: %v, want %q or %q", got, want[0], want[1])
		}
	}
	cancel()
	<-swaps
	if seen[0] == 0 || seen[1] == 0 {
		t.Errorf("answers from each table: %v; the swaps did not show", seen)
	}
	// After the last swap only the current table answers.
	for i, tbl := range tables {
		s.SetTable(tbl)
		r := exchange(t, "tcp", tcpAddr(s), newQuery("web.demo.svc.cluster.local.", dns.TypeA))
		if got := rrStrings(r.Answer); len(got) != 2 || !strings.Contains(strings.Join(got, " "), want[i][:8]) {
			t.Errorf("after SetTable(table %d): %v", i, got)
		}
	}
}
