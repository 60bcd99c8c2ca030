package upstream

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/internal/proxymetrics"
	"github.com/meshdns/meshdns/pkg/metric"
)

// server is a real DNS server on 127.0.0.1 (UDP and TCP on one port) with a
// programmable handler; it counts the queries it receives.
type server struct {
	Addr    string
	Queries atomic.Int64 // UDP and TCP
	TCP     atomic.Int64
}

// newServer starts h on 127.0.0.1:<free port> for UDP and TCP.
func newServer(t testing.TB, h func(w dns.ResponseWriter, req *dns.Msg)) *server {
	t.Helper()
	s := &server{}
	var (
		pc net.PacketConn
		ln net.Listener
	)
	// The kernel picks the UDP port; TCP on the same port may be taken,
	// so try a few times.
	for i := 0; ; i++ {
		var err error
		pc, err = net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("listen udp: %v", err)
		}
		ln, err = net.Listen("tcp", pc.LocalAddr().String())
		if err == nil {
			break
		}
		pc.Close()
		if i == 10 {
			t.Fatalf("listen tcp: %v", err)
		}
	}
	s.Addr = pc.LocalAddr().String()
	handler := dns.HandlerFunc(func(w dns.ResponseWriter, req *dns.Msg) {
		s.Queries.Add(1)
		if w.LocalAddr().Network() == "tcp" {
			s.TCP.Add(1)
		}
		h(w, req)
	})
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait) // runs after the Shutdowns registered below
	for _, srv := range []*dns.Server{
		{PacketConn: pc, Handler: handler},
		{Listener: ln, Handler: handler},
	} {
		started := make(chan struct{})
		srv.NotifyStartedFunc = func() { close(started) }
		wg.Go(func() { _ = srv.ActivateAndServe() })
		<-started
		t.Cleanup(func() { _ = srv.Shutdown() })
	}
	return s
}

// rawServer answers each UDP query with whatever bytes replies returns
// (any number of datagrams, possibly none). It speaks no DNS itself, so it
// can lie, spoof and send garbage.
func rawServer(t testing.TB, replies func(req []byte) [][]byte) *server {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen udp: %v", err)
	}
	s := &server{Addr: pc.LocalAddr().String()}
	var wg sync.WaitGroup
	wg.Go(func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			s.Queries.Add(1)
			for _, b := range replies(append([]byte(nil), buf[:n]...)) {
				_, _ = pc.WriteTo(b, from)
			}
		}
	})
	t.Cleanup(func() { pc.Close(); wg.Wait() })
	return s
}

// deadAddr returns a loopback UDP address nobody listens on (ICMP port
// unreachable: a network error at once).
func deadAddr(t testing.TB) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen udp: %v", err)
	}
	addr := pc.LocalAddr().String()
	pc.Close()
	return addr
}

// mustRR parses zone-file text.
func mustRR(t testing.TB, s string) dns.RR {
	t.Helper()
	rr, err := dns.NewRR(s)
	if err != nil {
		t.Fatalf("rr %q: %v", s, err)
	}
	return rr
}

// answerWith replies with rcode and the given records (zone-file text,
// "$QNAME" replaced by the question's name as asked).
func answerWith(t testing.TB, rcode int, answer, ns []string) func(dns.ResponseWriter, *dns.Msg) {
	return func(w dns.ResponseWriter, req *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(req, rcode)
		m.RecursionAvailable = true
		for _, s := range answer {
			m.Answer = append(m.Answer, mustRR(t, replaceQname(s, req.Question[0].Name)))
		}
		for _, s := range ns {
			m.Ns = append(m.Ns, mustRR(t, replaceQname(s, req.Question[0].Name)))
		}
		if o := req.IsEdns0(); o != nil {
			m.SetEdns0(o.UDPSize(), false)
		}
		_ = w.WriteMsg(m)
	}
}

func replaceQname(s, name string) string {
	const tok = "$QNAME"
	for i := 0; i+len(tok) <= len(s); i++ {
		if s[i:i+len(tok)] == tok {
			return s[:i] + name + s[i+len(tok):]
		}
	}
	return s
}

// clock is an injected time source.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// newTestResolver builds a Resolver on its own registry and closes it at
// cleanup. Zero Timeout becomes 5s: long enough that a loaded machine
// does not turn a slow answer into a retry (tests count upstream
// queries); tests of silent upstreams set their own.
func newTestResolver(t testing.TB, cfg Config) (*Resolver, *metrics.Registry) {
	t.Helper()
	reg := metrics.NewRegistry()
	cfg.Registry = proxymetrics.Registry(reg)
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	if cfg.ClientTimeout == 0 {
		// A window of one Timeout per attempt, so a test of failing
		// upstreams takes what its Timeout says, not a client's 5s.
		attempts := max(cfg.Attempts, len(cfg.Upstreams), 2)
		cfg.ClientTimeout = cfg.Timeout * time.Duration(attempts) * 25 / 24
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { r.Close() })
	return r, reg
}

// qwire packs a question the way a client sent it.
func qwire(t testing.TB, name string, qtype uint16) []byte {
	t.Helper()
	b, err := questionWire(dns.Question{Name: name, Qtype: qtype, Qclass: dns.ClassINET})
	if err != nil {
		t.Fatalf("question %q: %v", name, err)
	}
	return b
}

// view is the comparable part of a reply.
type view struct {
	Rcode  string
	Answer []string
	Ns     []string
	Extra  []string
}

func viewOf(m *dns.Msg) view {
	v := view{Rcode: dns.RcodeToString[m.Rcode]}
	for _, rr := range m.Answer {
		v.Answer = append(v.Answer, rr.String())
	}
	for _, rr := range m.Ns {
		v.Ns = append(v.Ns, rr.String())
	}
	for _, rr := range m.Extra {
		v.Extra = append(v.Extra, rr.String())
	}
	return v
}

// ask calls AppendReply for name/qtype and unpacks the reply, failing the
// test on error or on a reply that breaks the contract (ID 0, RD+RA, the
// question as sent, no OPT).
func ask(t testing.TB, r *Resolver, name string, qtype uint16) (*dns.Msg, Source) {
	t.Helper()
	q := qwire(t, name, qtype)
	b, src, err := r.AppendReply(context.Background(), nil, q)
	if err != nil {
		t.Fatalf("AppendReply(%s %s): %v", name, dns.TypeToString[qtype], err)
	}
	checkContract(t, b, q)
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		t.Fatalf("unpack reply: %v", err)
	}
	return m, src
}

func checkContract(t testing.TB, b, q []byte) {
	t.Helper()
	if len(b) < 12+len(q) {
		t.Fatalf("reply too short: %d bytes", len(b))
	}
	if b[0] != 0 || b[1] != 0 {
		t.Errorf("reply ID %d, want 0", int(b[0])<<8|int(b[1]))
	}
	if b[2]&0x81 != 0x81 || b[3]&0x80 == 0 {
		t.Errorf("reply flags %08b %08b: want QR, RD, RA", b[2], b[3])
	}
	if string(b[12:12+len(q)]) != string(q) {
		t.Errorf("reply question %q, want exactly %q", b[12:12+len(q)], q)
	}
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		t.Fatalf("unpack reply: %v", err)
	}
	if m.IsEdns0() != nil {
		t.Errorf("reply carries an OPT record")
	}
}

// counter reads a counter or gauge child of a vector.
// counter reads one of the Resolver's series: a counter, a gauge or the
// cache size's gauge function.
func counter(t testing.TB, c any) float64 {
	t.Helper()
	switch c := c.(type) {
	case *metric.Counter:
		return float64(c.Load())
	case *metric.Gauge:
		return float64(c.Load())
	case func() float64:
		return c()
	}
	t.Fatalf("counter of %T", c)
	return 0
}

func errCount(r *Resolver, up int, kind string) float64 {
	return float64(r.ups[up].errs[kind].Load())
}

// fixedOrder makes sequential tries go through the upstreams in config order.
func fixedOrder(r *Resolver) {
	r.perm = func(n int) []int {
		p := make([]int, n)
		for i := range p {
			p[i] = i
		}
		return p
	}
}
