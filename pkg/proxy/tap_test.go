package proxy

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// recordingTap keeps copies of what it was handed.
type recordingTap struct {
	mu  sync.Mutex
	got []TapAnswer
}

func (r *recordingTap) TapAnswer(a *TapAnswer) {
	c := *a
	c.Query, c.Reply = append([]byte(nil), a.Query...), append([]byte(nil), a.Reply...)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.got = append(r.got, c)
}

func (r *recordingTap) answers() []TapAnswer {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]TapAnswer(nil), r.got...)
}

// The Tap gets the answers the query log selects, over real UDP and TCP
// sockets, with the client's and the server's addresses, the query and
// reply as they crossed the wire, and the times.
func TestQueryTap(t *testing.T) {
	tap := &recordingTap{}
	cfg := testConfig(&fakeResolver{})
	cfg.QueryLog = QueryLogConfig{Classes: LogNXDomain}
	cfg.QueryTap = tap
	cfg.QueryLogger = slog.New(slog.DiscardHandler)
	s := startServer(t, cfg)
	s.SetTable(demoTable(t))

	exchange(t, "udp", udpAddr(s), newQuery("web.demo.svc.cluster.local.", dns.TypeA)) // NOERROR: not selected
	for _, network := range []string{"udp", "tcp"} {
		q := newQuery("nope.demo.svc.cluster.local.", dns.TypeA)
		c, err := net.Dial(network, map[string]string{"udp": udpAddr(s), "tcp": tcpAddr(s)}[network])
		if err != nil {
			t.Fatal(err)
		}
		co := &dns.Conn{Conn: c}
		if err := co.WriteMsg(q); err != nil {
			t.Fatal(err)
		}
		reply, err := co.ReadMsg()
		if err != nil {
			t.Fatal(err)
		}
		c.Close()
		got := tap.answers()
		if len(got) == 0 {
			t.Fatalf("%s: tap got nothing", network)
		}
		a := got[len(got)-1]
		wantProto := map[string]Protocol{"udp": UDP, "tcp": TCP}[network]
		if a.Protocol != wantProto || a.Client != netip.MustParseAddrPort(c.LocalAddr().String()) || a.Server != netip.MustParseAddrPort(c.RemoteAddr().String()) {
			t.Errorf("%s: protocol %v client %v server %v, want %v %v %v", network, a.Protocol, a.Client, a.Server, wantProto, c.LocalAddr(), c.RemoteAddr())
		}
		var qm, rm dns.Msg
		if err := qm.Unpack(a.Query); err != nil || qm.Id != q.Id || qm.Question[0].Name != "nope.demo.svc.cluster.local." {
			t.Errorf("%s: query %v, %v", network, &qm, err)
		}
		if err := rm.Unpack(a.Reply); err != nil || rm.Id != reply.Id || rm.Rcode != dns.RcodeNameError {
			t.Errorf("%s: reply %v, %v", network, &rm, err)
		}
		if a.Received.IsZero() || a.Answered.Before(a.Received) {
			t.Errorf("%s: received %v answered %v", network, a.Received, a.Answered)
		}
	}
	if n := len(tap.answers()); n != 2 {
		t.Errorf("tap got %d answers, want 2 (the NXDOMAINs)", n)
	}
}

// With the real Resolver against a real upstream, an answer fetched
// upstream carries the exchange (from the agent's socket to the upstream,
// the reply answering the query sent); a table answer and a cache hit
// carry none.
func TestQueryTapForwarded(t *testing.T) {
	s, tap, up := tappedRealStack(t)

	for _, name := range []string{"example.org.", "example.org.", "web.demo.svc.cluster.local."} {
		exchange(t, "udp", udpAddr(s), newQuery(name, dns.TypeA))
	}
	got := tap.answers()
	if len(got) != 3 {
		t.Fatalf("tap got %d answers, want 3", len(got))
	}
	f := got[0].Forwarded
	if f == nil {
		t.Fatal("upstream answer without its exchange")
	}
	if f.Transport != upstream.TransportUDP || f.Upstream != netip.MustParseAddrPort(up) || !f.Local.IsValid() {
		t.Errorf("exchange transport %d local %v upstream %v, want UDP from a socket to %s", f.Transport, f.Local, f.Upstream, up)
	}
	var qm, rm dns.Msg
	if err := qm.Unpack(f.Query); err != nil || qm.Question[0].Name != "example.org." {
		t.Errorf("forwarded query %v: %v", &qm, err)
	}
	if err := rm.Unpack(f.Reply); err != nil || rm.Id != qm.Id || len(rm.Answer) != 1 {
		t.Errorf("forwarded reply %v: %v", &rm, err)
	}
	if f.Sent.Before(got[0].Received) || f.Received.Before(f.Sent) || got[0].Answered.Before(f.Received) {
		t.Errorf("times out of order: received %v, sent %v, got back %v, answered %v", got[0].Received, f.Sent, f.Received, got[0].Answered)
	}
	for i, what := range []string{"cache hit", "table answer"} {
		if f := got[i+1].Forwarded; f != nil {
			t.Errorf("%s carries an exchange: %+v", what, f)
		}
	}
}

// tappedRealStack runs a Server with a real nametable and the real
// Resolver against a real upstream, its query log (every answer) going to
// the returned Tap only.
func tappedRealStack(t *testing.T) (*Server, *recordingTap, string) {
	t.Helper()
	up, _ := startUpstream(t)
	r, err := upstream.New(upstream.Config{Upstreams: []string{up}, Timeout: 5 * time.Second, Registry: newTestRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Close() })
	tap := &recordingTap{}
	cfg := testConfig(r)
	cfg.QueryLog = QueryLogConfig{Classes: LogAll}
	cfg.QueryTap = tap
	cfg.QueryLogger = slog.New(slog.DiscardHandler)
	s := startServer(t, cfg)
	s.SetTable(realTable(t))
	return s, tap, up
}

// The forwarder exchange follows the client answer's sampling: a sampled
// answer carries its exchange, an unsampled one reaches the Tap not at all.
func TestQueryTapForwardedSampled(t *testing.T) {
	s, tap, _ := tappedRealStack(t)
	var draws atomic.Int64
	// Read only by SetQueryLog, on this goroutine: odd draws sample out.
	s.h.obs.SetQueryLogClock(nil, func(int) int { return int(draws.Add(1) % 2) })
	s.SetQueryLog(QueryLogConfig{Classes: LogAll, Sample: 2})
	exchange(t, "udp", udpAddr(s), newQuery("out.example.org.", dns.TypeA))
	exchange(t, "udp", udpAddr(s), newQuery("in.example.org.", dns.TypeA))
	got := tap.answers()
	if len(got) != 1 || got[0].Forwarded == nil {
		t.Fatalf("tap got %+v, want the second answer with its exchange", got)
	}
	var qm dns.Msg
	if err := qm.Unpack(got[0].Forwarded.Query); err != nil || qm.Question[0].Name != "in.example.org." {
		t.Errorf("exchange of %v (%v), want in.example.org.'s", &qm, err)
	}
}
