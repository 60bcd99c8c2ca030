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

	"github.com/meshdns/meshdns/internal/testenv"
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

func TestTCPConnectionLimit(t *testing.T) {
	cfg := testConfig(&fakeResolver{})
	cfg.MaxTCPConns = 2
	s := startServer(t, cfg)
	s.SetTable(demoTable(t))
	held := []net.Conn{dialTCP(t, s), dialTCP(t, s)}
	for _, c := range held {
		// A round trip makes sure the server counted the connection.
		if _, err := c.Write(frame(t, newQuery("web.demo.svc.cluster.local.", dns.TypeA))); err != nil {
			t.Fatal(err)
		}
		readFrame(t, c)
	}
	extra := dialTCP(t, s)
	_, _ = extra.Write(frame(t, newQuery("web.demo.svc.cluster.local.", dns.TypeA)))
	_ = extra.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := extra.Read(make([]byte, 2)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("third connection: read %d bytes, err %v; want it closed", n, err)
	}
	// Closing one makes room again.
	held[0].Close()
	testenv.Eventually(t, "room for a connection after closing one", 5*time.Second, func() bool {
		c, err := net.Dial("tcp", tcpAddr(s))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, _ = c.Write(frame(t, newQuery("web.demo.svc.cluster.local.", dns.TypeA)))
		_ = c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		_, err = c.Read(make([]byte, 2))
		return err == nil
	})
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
