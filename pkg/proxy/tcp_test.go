package proxy

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/meshdns/meshdns/pkg/proxy/observe"
)

func dialTCP(t *testing.T, s *Server) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", tcpAddr(s), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func frame(t *testing.T, m *dns.Msg) []byte {
	t.Helper()
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte{byte(len(b) >> 8), byte(len(b))}, b...)
}

func readFrame(t *testing.T, c net.Conn) *dns.Msg {
	t.Helper()
	_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		t.Fatalf("read length: %v", err)
	}
	b := make([]byte, binary.BigEndian.Uint16(l[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read message: %v", err)
	}
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		t.Fatalf("unpack: %v", err)
	}
	return m
}

// RFC 7766 6.2.1.1: several queries written back to back on one
// connection, including a forwarded one, all get their reply.
func TestTCPPipelining(t *testing.T) {
	s := startServer(t, testConfig(&fakeResolver{answer: staticAnswer(t, "A 192.0.2.9")}))
	s.SetTable(demoTable(t))
	c := dialTCP(t, s)
	names := []string{"web.demo.svc.cluster.local.", "www.example.org.", "nope.demo.svc.cluster.local.", "big.demo.svc.cluster.local."}
	var batch []byte
	want := map[uint16]string{}
	for i, n := range names {
		m := newQuery(n, dns.TypeA)
		if i == 3 {
			m.Question[0].Qtype = dns.TypeAAAA
		}
		m.Id = uint16(100 + i)
		want[m.Id] = n
		batch = append(batch, frame(t, m)...)
	}
	// One write: the queries arrive in one segment.
	if _, err := c.Write(batch); err != nil {
		t.Fatal(err)
	}
	for range names {
		r := readFrame(t, c)
		if want[r.Id] != r.Question[0].Name {
			t.Errorf("reply %d for %s, want %s", r.Id, r.Question[0].Name, want[r.Id])
		}
		if r.Id == 103 && (r.Truncated || len(r.Answer) != 60) {
			t.Errorf("big answer over tcp: tc %v, %d answers; want all 60", r.Truncated, len(r.Answer))
		}
		delete(want, r.Id)
	}
	if len(want) != 0 {
		t.Errorf("no reply for %v", want)
	}
}

func TestTCPIdleTimeout(t *testing.T) {
	cfg := testConfig(&fakeResolver{})
	cfg.TCPIdleTimeout = 200 * time.Millisecond
	s := startServer(t, cfg)
	s.SetTable(demoTable(t))
	c := dialTCP(t, s)
	if _, err := c.Write(frame(t, newQuery("web.demo.svc.cluster.local.", dns.TypeA))); err != nil {
		t.Fatal(err)
	}
	readFrame(t, c)
	// Idle now: the server closes within the timeout (plus slack).
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	startT := time.Now()
	_, err := c.Read(make([]byte, 1))
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("connection still open after %v", time.Since(startT))
	}
	if d := time.Since(startT); d > 2*time.Second {
		t.Errorf("closed after %v, want about 200ms", d)
	}
}

// roundTrip sends one table query on c and reads its reply; false when
// the connection is closed or the reply does not come within wait.
func roundTrip(t testing.TB, c net.Conn, wait time.Duration) bool {
	t.Helper()
	m := newQuery("web.demo.svc.cluster.local.", dns.TypeA)
	b, _ := m.Pack()
	if _, err := c.Write(append([]byte{byte(len(b) >> 8), byte(len(b))}, b...)); err != nil {
		return false
	}
	_ = c.SetReadDeadline(time.Now().Add(wait))
	var l [2]byte
	if _, err := io.ReadFull(c, l[:]); err != nil {
		return false
	}
	_, err := io.ReadFull(c, make([]byte, binary.BigEndian.Uint16(l[:])))
	return err == nil
}

// closed reports whether the server closed c (a read ends in EOF or a
// reset within wait).
func closed(c net.Conn, wait time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(wait))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !errors.Is(err, os.ErrDeadlineExceeded)
}

// busyConn opens a connection whose forwarded query blocks in the
// resolver, so the connection has a query in progress.
func busyConn(t *testing.T, s *Server, res *fakeResolver, local string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second}
	if local != "" {
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP(local)}
	}
	c, err := d.Dial("tcp", tcpAddr(s))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	before := res.calls.Load()
	if _, err := c.Write(frame(t, newQuery("slow.example.org.", dns.TypeA))); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, "the forwarded query to reach the resolver", 5*time.Second, func() bool {
		return res.calls.Load() > before
	})
	return c
}

// waitIdle waits until no connection of s has a query in progress.
func waitIdle(t *testing.T, s *Server) {
	t.Helper()
	testenv.Eventually(t, "every connection idle", 5*time.Second, func() bool {
		s.tcpConns.mu.Lock()
		defer s.tcpConns.mu.Unlock()
		for tc := range s.tcpConns.conns {
			if tc.busy.Load() != 0 {
				return false
			}
		}
		return true
	})
}

// At the bound, the connection idle the longest makes room; when every
// connection has a query in progress, a newcomer is closed.
func TestTCPConnectionLimit(t *testing.T) {
	t.Run("idle connections are reclaimed, oldest first", func(t *testing.T) {
		cfg := testConfig(&fakeResolver{})
		cfg.MaxTCPConns, cfg.MaxTCPConnsPerClient = 2, 2
		s := startServer(t, cfg)
		s.SetTable(demoTable(t))
		old, recent := dialTCP(t, s), dialTCP(t, s)
		for _, c := range []net.Conn{old, recent} {
			if !roundTrip(t, c, 2*time.Second) {
				t.Fatal("no reply on a held connection")
			}
			// The server marks a query done just after writing its
			// reply: wait for that, so the activity order is the
			// test's.
			waitIdle(t, s)
		}
		if !roundTrip(t, recent, 2*time.Second) { // recent is now the last active
			t.Fatal("no reply")
		}
		waitIdle(t, s)
		if !roundTrip(t, dialTCP(t, s), 2*time.Second) {
			t.Fatal("a newcomer at the bound was not served")
		}
		if !closed(old, 2*time.Second) {
			t.Error("the longest-idle connection was not closed for the newcomer")
		}
		if !roundTrip(t, recent, 2*time.Second) {
			t.Error("the more recently active connection was closed instead")
		}
		if got := s.h.obs.Dropped(TCP, observe.DropTCPReclaimed); got != 1 {
			t.Errorf("tcp_reclaimed = %v, want 1", got)
		}
	})
	t.Run("busy connections are kept and the newcomer refused", func(t *testing.T) {
		res := &fakeResolver{answer: staticAnswer(t, "A 192.0.2.9"), block: make(chan struct{})}
		cfg := testConfig(res)
		cfg.MaxTCPConns, cfg.MaxTCPConnsPerClient = 2, 2
		s := startServer(t, cfg)
		s.SetTable(demoTable(t))
		held := []net.Conn{busyConn(t, s, res, ""), busyConn(t, s, res, "")}
		extra := dialTCP(t, s)
		if roundTrip(t, extra, 2*time.Second) || !closed(extra, time.Second) {
			t.Error("a newcomer was served while every connection was busy")
		}
		close(res.block)
		for _, c := range held {
			if r := readFrame(t, c); len(r.Answer) != 1 {
				t.Errorf("busy connection's reply has %d answers, want 1", len(r.Answer))
			}
		}
		// Idle now: a newcomer reclaims one.
		if !roundTrip(t, dialTCP(t, s), 2*time.Second) {
			t.Error("no room for a newcomer once the connections went idle")
		}
	})
	t.Run("per-client cap", func(t *testing.T) {
		res := &fakeResolver{answer: staticAnswer(t, "A 192.0.2.9"), block: make(chan struct{})}
		t.Cleanup(func() { close(res.block) })
		cfg := testConfig(res)
		cfg.MaxTCPConns, cfg.MaxTCPConnsPerClient = 10, 2
		s := startServer(t, cfg)
		s.SetTable(demoTable(t))
		busyConn(t, s, res, "127.0.0.1")
		busyConn(t, s, res, "127.0.0.1")
		d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.1")}}
		third, err := d.Dial("tcp", tcpAddr(s))
		if err != nil {
			t.Fatal(err)
		}
		defer third.Close()
		if roundTrip(t, third, time.Second) {
			t.Error("a client at its cap with busy connections got a third one")
		}
		d.LocalAddr = &net.TCPAddr{IP: net.ParseIP("127.0.0.2")}
		other, err := d.Dial("tcp", tcpAddr(s))
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		if !roundTrip(t, other, 2*time.Second) {
			t.Error("another client was refused while the server had room")
		}
	})
}

// A connection that keeps sending queries is still closed at its maximum
// age, after answering what it asked.
func TestTCPMaxConnAge(t *testing.T) {
	cfg := testConfig(&fakeResolver{})
	cfg.MaxTCPConnAge = 300 * time.Millisecond
	s := startServer(t, cfg)
	s.SetTable(demoTable(t))
	c := dialTCP(t, s)
	start := time.Now()
	for roundTrip(t, c, 2*time.Second) {
		if time.Since(start) > 5*time.Second {
			t.Fatal("connection still open after 5s, want closed at its 300ms age")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("closed after %v, before its maximum age", d)
	}
}

// TestTCPUnderAbuse: 300 connections from the same client (in a pod every
// process shares the source address), half idle after one query as a
// client sending a query every few seconds is, half stuck in a length
// prefix (slowloris), do not keep 30 normal clients from being served over
// TCP. The latency figure comes from BenchmarkTCPUnderAbuse.
func TestTCPUnderAbuse(t *testing.T) {
	s := startServer(t, testConfig(&fakeResolver{}))
	s.SetTable(demoTable(t))
	openAbusers(t, s, 300)
	for i := range 30 {
		c, err := net.DialTimeout("tcp", tcpAddr(s), 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !roundTrip(t, c, 2*time.Second) {
			t.Fatalf("normal client %d not served with 300 abusive connections open", i)
		}
		c.Close()
	}
	if n := s.tcpConns.len(); n > defaultMaxTCPConns {
		t.Errorf("%d connections open, more than the bound %d", n, defaultMaxTCPConns)
	}
}

// openAbusers opens n connections to s: even ones send a query and then
// idle, odd ones send one byte of a length prefix and stall.
func openAbusers(tb testing.TB, s *Server, n int) {
	tb.Helper()
	for i := range n {
		c, err := net.DialTimeout("tcp", tcpAddr(s), 2*time.Second)
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { c.Close() })
		if i%2 == 0 {
			roundTrip(tb, c, 2*time.Second) // may be reclaimed already
		} else {
			_, _ = c.Write([]byte{0})
		}
	}
}

// A forwarded query waiting for a slow upstream does not hold up the
// table answers pipelined behind it on the same connection.
func TestTCPSlowForwardOutOfOrder(t *testing.T) {
	res := &fakeResolver{answer: staticAnswer(t, "A 192.0.2.9"), block: make(chan struct{})}
	s := startServer(t, testConfig(res))
	s.SetTable(demoTable(t))
	c := dialTCP(t, s)
	slow := newQuery("slow.example.org.", dns.TypeA)
	slow.Id = 1
	fast := newQuery("web.demo.svc.cluster.local.", dns.TypeA)
	fast.Id = 2
	if _, err := c.Write(append(frame(t, slow), frame(t, fast)...)); err != nil {
		t.Fatal(err)
	}
	if r := readFrame(t, c); r.Id != 2 || len(r.Answer) != 3 {
		t.Fatalf("first reply id %d with %d answers, want the table answer (id 2)", r.Id, len(r.Answer))
	}
	close(res.block)
	if r := readFrame(t, c); r.Id != 1 || len(r.Answer) != 1 {
		t.Fatalf("second reply id %d with %d answers, want the forwarded answer (id 1)", r.Id, len(r.Answer))
	}
}
