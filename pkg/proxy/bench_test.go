package proxy

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/nametable"
	"github.com/meshdns/meshdns/pkg/proxy/observe"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// cachedResolver answers every question with one stored reply, patching
// the question in, the way the real Resolver serves a cache hit: no
// allocation, so a benchmark through it measures the proxy's share.
type cachedResolver struct {
	reply []byte // header + question + answer for www.example.org A
}

func newCachedResolver(t testing.TB) *cachedResolver {
	m := newQuery("www.example.org.", dns.TypeA)
	m.Id = 0
	m.Response, m.RecursionAvailable = true, true
	m.Answer = mustRRs(t, "www.example.org. 60 IN A 192.0.2.1")
	m.Compress = true
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return &cachedResolver{reply: b}
}

func (c *cachedResolver) AppendCached(dst, qwire, _ []byte, _ *upstream.Probe) ([]byte, upstream.Source, bool) {
	out := append(dst, c.reply...)
	copy(out[dnswire.HeaderLen:], qwire)
	return out, upstream.SourceCache, true
}

func (c *cachedResolver) Resolve(context.Context, []byte, []byte, []byte, *upstream.Probe) ([]byte, upstream.Source, error) {
	return nil, upstream.SourceCache, net.ErrClosed
}

func (c *cachedResolver) Exchange(context.Context, dns.Question) (*dns.Msg, upstream.Source, error) {
	return nil, upstream.SourceCache, net.ErrClosed
}

var benchQuestions = []struct {
	name  string
	qname string
	qtype uint16
	edns  bool
}{
	{name: "known", qname: "web.demo.svc.cluster.local.", qtype: dns.TypeA},
	{name: "known_edns", qname: "web.demo.svc.cluster.local.", qtype: dns.TypeA, edns: true},
	{name: "search_expanded", qname: "web.demo.svc.cluster.local.demo.svc.cluster.local.", qtype: dns.TypeA},
	{name: "nxdomain", qname: "nope.demo.svc.cluster.local.", qtype: dns.TypeA},
	{name: "cache_hit", qname: "www.example.org.", qtype: dns.TypeA},
}

// answerTimeEveryFlag overrides observe.TimeEvery in the benchmarks, to
// compare timing every answer (1) with sampling.
var answerTimeEveryFlag = flag.Uint("answer-time-every", observe.TimeEvery, "time one answer in N in benchmarks (a power of two)")

func setBenchTiming(h *Handler) { h.obs.SetTimeEvery(uint32(*answerTimeEveryFlag)) }

func BenchmarkHandler(b *testing.B) {
	h, err := NewHandler(testConfig(newCachedResolver(b)))
	if err != nil {
		b.Fatal(err)
	}
	setBenchTiming(h)
	h.SetTable(demoTable(b))
	ctx := context.Background()
	for _, bq := range benchQuestions {
		b.Run(bq.name, func(b *testing.B) {
			m := newQuery(bq.qname, bq.qtype)
			if bq.edns {
				m.SetEdns0(1232, false)
			}
			pkt, err := m.Pack()
			if err != nil {
				b.Fatal(err)
			}
			dst := make([]byte, 0, maxUDPPacket)
			b.ReportAllocs()
			for b.Loop() {
				if r := h.Serve(ctx, dst, pkt, UDP); len(r) < dnswire.HeaderLen {
					b.Fatal("no reply")
				}
			}
		})
	}
}

// BenchmarkLoopbackUDP sends queries over real loopback sockets, one at a
// time, so allocs/op covers the server's read, serve and write.
func BenchmarkLoopbackUDP(b *testing.B) {
	cfg := testConfig(newCachedResolver(b))
	cfg.UDPSockets = 1
	s := startServer(b, cfg)
	s.SetTable(demoTable(b))
	for _, bq := range benchQuestions {
		b.Run(bq.name, func(b *testing.B) {
			pkt, err := newQuery(bq.qname, bq.qtype).Pack()
			if err != nil {
				b.Fatal(err)
			}
			c, err := net.Dial("udp", udpAddr(s))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, 4096)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Write(pkt); err != nil {
					b.Fatal(err)
				}
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				if _, err := c.Read(buf); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkLoopbackRealStack is the agent's data path with real parts: a
// nametable.Table, the upstream Resolver with its cache in front of a DNS
// server on loopback, and real UDP sockets. Cache hits included, nothing
// may allocate.
func BenchmarkLoopbackRealStack(b *testing.B) {
	s, _ := realStack(b)
	for _, bq := range []struct{ name, qname string }{
		{name: "known", qname: "web.demo.svc.cluster.local."},
		{name: "search_expanded", qname: "web.demo.demo.svc.cluster.local."},
		{name: "nxdomain", qname: "google.com.demo.svc.cluster.local."},
		{name: "cache_hit", qname: "www.example.org."},
	} {
		b.Run(bq.name, func(b *testing.B) {
			pkt, err := newQuery(bq.qname, dns.TypeA).Pack()
			if err != nil {
				b.Fatal(err)
			}
			c, err := net.Dial("udp", udpAddr(s))
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			buf := make([]byte, 4096)
			roundTrip := func() {
				if _, err := c.Write(pkt); err != nil {
					b.Fatal(err)
				}
				_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
				n, err := c.Read(buf)
				if err != nil {
					b.Fatal(err)
				}
				if buf[3]&0x0f == dns.RcodeServerFailure || n < dnswire.HeaderLen {
					b.Fatalf("bad reply %x", buf[:n])
				}
			}
			roundTrip() // fills the answer cache and the Resolver's cache
			b.ReportAllocs()
			for b.Loop() {
				roundTrip()
			}
		})
	}
}

// BenchmarkHandlerManyNames cycles through 1000 known names of a real
// 10,000-service table, so the answer cache is exercised beyond the CPU
// caches as it is under dnsperf.
func BenchmarkHandlerManyNames(b *testing.B) {
	tbl := serviceTable(b, 10000)
	h, err := NewHandler(testConfig(newCachedResolver(b)))
	if err != nil {
		b.Fatal(err)
	}
	h.SetTable(tbl)
	pkts := make([][]byte, 1000)
	for i := range pkts {
		if pkts[i], err = newQuery(fmt.Sprintf("svc%d.ns%d.svc.cluster.local.", i*7, (i*7)%100), dns.TypeA).Pack(); err != nil {
			b.Fatal(err)
		}
	}
	ctx := context.Background()
	dst := make([]byte, 0, maxUDPPacket)
	for _, p := range pkts {
		h.Serve(ctx, dst, p, UDP)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		if r := h.Serve(ctx, dst, pkts[i%len(pkts)], UDP); len(r) < dnswire.HeaderLen || r[7] != 1 {
			b.Fatalf("reply %x", r)
		}
		i++
	}
}

// BenchmarkTCPUnderAbuse: a normal client's TCP lookup (connect, one table
// query, reply, close) while 300 abusive connections are open (half idle
// after a query, half stalled in a length prefix; see TestTCPUnderAbuse).
// Reports the p50 and p99 of the lookups; the bar is 100ms.
func BenchmarkTCPUnderAbuse(b *testing.B) {
	s := startServer(b, testConfig(&fakeResolver{}))
	s.SetTable(demoTable(b))
	openAbusers(b, s, 300)
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		c, err := net.DialTimeout("tcp", tcpAddr(s), 2*time.Second)
		if err != nil {
			b.Fatal(err)
		}
		if !roundTrip(b, c, 2*time.Second) {
			b.Fatal("normal client not served")
		}
		c.Close()
		lat = append(lat, time.Since(start))
		// Keep the abuse going: each lookup reclaimed an abuser's slot.
		openAbusers(b, s, 1)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
}

// serviceTable is a table of n Kubernetes services svc<i>.ns<i%100> with one
// address each, for a pod in ns0.
func serviceTable(b testing.TB, n int) *nametable.Table {
	b.Helper()
	return newServiceTable(b, n, nametable.Context{Namespace: "ns0"})
}

// searchTable is serviceTable for a pod in ns0 with the Kubernetes search
// path, so search-expanded names answer with a CNAME.
func searchTable(b testing.TB, n int) *nametable.Table {
	b.Helper()
	return newServiceTable(b, n, nametable.Context{Namespace: "ns0",
		Search: []string{"ns0.svc.cluster.local", "svc.cluster.local", "cluster.local"}})
}

func newServiceTable(b testing.TB, n int, pod nametable.Context) *nametable.Table {
	b.Helper()
	var entries []nametable.Entry
	for i := range n {
		entries = append(entries, nametable.Entry{
			Hostname: fmt.Sprintf("svc%d.ns%d.svc.cluster.local", i, i%100), Registry: "Kubernetes",
			ShortName: fmt.Sprintf("svc%d", i), Namespace: fmt.Sprintf("ns%d", i%100),
			IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})},
		})
	}
	tbl, err := nametable.New(entries, []string{"cluster.local"}, pod)
	if err != nil {
		b.Fatal(err)
	}
	return tbl
}
