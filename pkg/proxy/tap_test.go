package proxy

import (
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"testing"

	"github.com/miekg/dns"
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
