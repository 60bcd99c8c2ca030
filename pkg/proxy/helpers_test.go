package proxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/nametable"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// mustRR builds an RR from zone-file text.
func mustRR(t testing.TB, s string) dns.RR {
	t.Helper()
	rr, err := dns.NewRR(s)
	if err != nil {
		t.Fatalf("NewRR(%q): %v", s, err)
	}
	return rr
}

func mustRRs(t testing.TB, ss ...string) []dns.RR {
	t.Helper()
	var out []dns.RR
	for _, s := range ss {
		out = append(out, mustRR(t, s))
	}
	return out
}

// fakeTable answers from a map keyed by "lowercase fqdn/TYPE"; everything
// else is forwarded. It counts lookups, so tests can see the answer cache.
type fakeTable struct {
	results map[string]nametable.Result
	lookups atomic.Int64
}

func (f *fakeTable) Lookup(q dns.Question) nametable.Result {
	f.lookups.Add(1)
	if r, ok := f.results[strings.ToLower(q.Name)+"/"+dns.TypeToString[q.Qtype]]; ok {
		return r
	}
	return nametable.Result{Action: nametable.Forward}
}

// demoTable is the table most tests use: a service with three addresses,
// a search-expanded name, a NODATA, an authoritative NXDOMAIN zone, a big
// answer for truncation, and an ExternalName.
func demoTable(t testing.TB) *fakeTable {
	t.Helper()
	soa := mustRRs(t, "cluster.local. 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30")
	web := mustRRs(t, "x. 30 IN A 10.0.0.1", "x. 30 IN A 10.0.0.2", "x. 30 IN A 10.0.0.3")
	var big, huge []dns.RR
	for i := range 60 {
		big = append(big, mustRR(t, fmt.Sprintf("x. 30 IN AAAA fd00::%x", i+1)))
	}
	// Above a UDP reader's first reply buffer (readerReplyBuf).
	for i := range 250 {
		huge = append(huge, mustRR(t, fmt.Sprintf("x. 30 IN AAAA fd00::1:%x", i+1)))
	}
	return &fakeTable{results: map[string]nametable.Result{
		"web.demo.svc.cluster.local./A":    {Action: nametable.Answer, Answer: web},
		"web.demo.svc.cluster.local./AAAA": {Action: nametable.Answer, Ns: soa},
		"web.demo.svc.cluster.local.demo.svc.cluster.local./A": {
			Action: nametable.Answer, Alias: "web.demo.svc.cluster.local", Answer: web,
		},
		"nope.demo.svc.cluster.local./A":    {Action: nametable.Answer, Rcode: dns.RcodeNameError, Ns: soa},
		"big.demo.svc.cluster.local./AAAA":  {Action: nametable.Answer, Answer: big},
		"huge.demo.svc.cluster.local./AAAA": {Action: nametable.Answer, Answer: huge},
		"db.demo.svc.cluster.local./A": {
			Action: nametable.Answer, Answer: mustRRs(t, "x. 30 IN CNAME db.example.org."), Chase: "db.example.org.",
		},
		"db.demo.svc.cluster.local./CNAME": {
			Action: nametable.Answer, Answer: mustRRs(t, "x. 30 IN CNAME db.example.org."), Chase: "db.example.org.",
		},
	}}
}

// fakeResolver has no cache; it answers Resolve and Exchange from answer (or fails with
// err) and honours the Resolver contract: ID 0, the question bytes as
// given, RD and RA set, no OPT.
type fakeResolver struct {
	mu     sync.Mutex
	answer func(q dns.Question) (*dns.Msg, error) // guarded by mu
	src    upstream.Source
	calls  atomic.Int64
	// block, when not nil, holds every call until it is closed.
	block chan struct{}
}

func (f *fakeResolver) reply(ctx context.Context, q dns.Question) (*dns.Msg, error) {
	f.calls.Add(1)
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	f.mu.Lock()
	fn := f.answer
	f.mu.Unlock()
	if fn == nil {
		return nil, errors.New("no upstream")
	}
	m, err := fn(q)
	if err != nil {
		return nil, err
	}
	m.Id = 0
	m.Response = true
	m.RecursionDesired = true
	m.RecursionAvailable = true
	m.Question = []dns.Question{q}
	return m, nil
}

func (f *fakeResolver) AppendCached(dst, _, _ []byte, _ *upstream.Probe) ([]byte, upstream.Source, bool) {
	return dst, upstream.SourceCache, false
}

func (f *fakeResolver) Resolve(ctx context.Context, dst, qwire, _ []byte, _ *upstream.Probe) ([]byte, upstream.Source, error) {
	var probe dns.Msg
	hdr := append(make([]byte, 0, 12+len(qwire)), 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0)
	if err := probe.Unpack(append(hdr, qwire...)); err != nil || len(probe.Question) != 1 {
		return nil, f.src, errors.New("bad question")
	}
	m, err := f.reply(ctx, probe.Question[0])
	if err != nil {
		return nil, f.src, err
	}
	m.Compress = false
	out, err := m.PackBuffer(dst)
	if err != nil {
		return nil, f.src, err
	}
	return out, f.src, nil
}

func (f *fakeResolver) Exchange(ctx context.Context, q dns.Question) (*dns.Msg, upstream.Source, error) {
	m, err := f.reply(ctx, q)
	return m, f.src, err
}

// staticAnswer makes every forwarded question answer with the given RRs,
// owned by the question name.
func staticAnswer(t testing.TB, rdata ...string) func(q dns.Question) (*dns.Msg, error) {
	t.Helper()
	return func(q dns.Question) (*dns.Msg, error) {
		m := new(dns.Msg)
		for _, r := range rdata {
			rr, err := dns.NewRR(q.Name + " 60 IN " + r)
			if err != nil {
				return nil, err
			}
			if rr.Header().Rrtype == q.Qtype {
				m.Answer = append(m.Answer, rr)
			}
		}
		return m, nil
	}
}

// testConfig is a Config on 127.0.0.1:0 with a private registry.
func testConfig(r Resolver) Config {
	return Config{
		Addrs:      []string{"127.0.0.1:0"},
		Resolver:   r,
		Logger:     slog.New(slog.DiscardHandler),
		Registry:   newTestRegistry(),
		UDPSockets: 2,
	}
}

// startServer runs a Server for the test and returns it listening.
func startServer(t testing.TB, cfg Config) *Server {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := s.Listen(); err != nil {
		t.Fatalf("Listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	})
	return s
}

func udpAddr(s *Server) string { return s.UDPAddrs()[0].String() }
func tcpAddr(s *Server) string { return s.TCPAddrs()[0].String() }

// exchange sends m over net ("udp" or "tcp") and returns the reply.
func exchange(t testing.TB, network, addr string, m *dns.Msg) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: network, Timeout: 2 * time.Second, UDPSize: 65535}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("exchange %s %s %s: %v", network, addr, m.Question[0].Name, err)
	}
	return r
}

// rawExchange sends pkt over UDP and returns the reply, or nil after wait.
func rawExchange(t testing.TB, addr string, pkt []byte, wait time.Duration) []byte {
	t.Helper()
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(pkt); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	buf := make([]byte, 65535)
	n, err := c.Read(buf)
	if err != nil {
		return nil
	}
	return buf[:n]
}

func newQuery(name string, qtype uint16) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	return m
}

// rrStrings renders RRs for cmp.Diff.
func rrStrings(rrs []dns.RR) []string {
	var out []string
	for _, rr := range rrs {
		out = append(out, rr.String())
	}
	return out
}

// testRegistry keeps the metric families a Handler registers, for tests
// to read.
type testRegistry struct {
	mu   sync.Mutex // guards fams
	fams map[string]Family
}

func newTestRegistry() *testRegistry { return &testRegistry{fams: map[string]Family{}} }

func (r *testRegistry) Register(f Family) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.fams[f.Name]; ok {
		return fmt.Errorf("%s registered twice", f.Name)
	}
	r.fams[f.Name] = f
	return nil
}

// names returns the registered family names, sorted.
func (r *testRegistry) names() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Sorted(maps.Keys(r.fams))
}

// series returns the series of family name by their label values joined
// with commas.
func (r *testRegistry) series(t testing.TB, name string) map[string]Series {
	t.Helper()
	r.mu.Lock()
	f, ok := r.fams[name]
	r.mu.Unlock()
	if !ok {
		t.Fatalf("no metric %s", name)
	}
	out := map[string]Series{}
	f.Collect(func(s Series) {
		s.LabelValues, s.Counts = slices.Clone(s.LabelValues), slices.Clone(s.Counts)
		out[strings.Join(s.LabelValues, ",")] = s
	})
	return out
}

// value returns the value of the series of name with labelValues, 0 when
// it has none.
func (r *testRegistry) value(t testing.TB, name string, labelValues ...string) float64 {
	t.Helper()
	return r.series(t, name)[strings.Join(labelValues, ",")].Value
}

// wire is name in lowercase wire form, as the handler records it.
func wire(t testing.TB, name string) []byte {
	t.Helper()
	b, err := zoneWire(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
