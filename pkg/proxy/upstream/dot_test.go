package upstream

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/testkit/certtest"
)

// dotServer is a DNS-over-TLS server on 127.0.0.1 whose every accepted
// connection is handed to serve; it counts the connections.
type dotServer struct {
	Addr  string // host:port
	Roots *x509.CertPool
	Conns atomic.Int64
}

// newDoTServer starts a TLS listener with a certificate for 127.0.0.1,
// localhost and dns.test, signed by a CA of its own (Roots).
func newDoTServer(t testing.TB, serve func(c net.Conn)) *dotServer {
	t.Helper()
	ca := certtest.NewCA(t, "dot test CA")
	certPEM, keyPEM := ca.Issue(t, "dns.test", true, certtest.DNSNames("dns.test"))
	ln, err := tls.Listen("tcp", "127.0.0.1:0", certtest.ServerTLS(t, certPEM, keyPEM, nil))
	if err != nil {
		t.Fatalf("listen tls: %v", err)
	}
	s := &dotServer{Addr: ln.Addr().String(), Roots: x509.NewCertPool()}
	s.Roots.AddCert(ca.Cert)
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.Conns.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { defer c.Close(); serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return s
}

// readFrame reads one length-prefixed DNS message.
func readFrame(c net.Conn) (*dns.Msg, error) {
	var hdr [2]byte
	if _, err := io.ReadFull(c, hdr[:]); err != nil {
		return nil, err
	}
	b := make([]byte, binary.BigEndian.Uint16(hdr[:]))
	if _, err := io.ReadFull(c, b); err != nil {
		return nil, err
	}
	m := new(dns.Msg)
	return m, m.Unpack(b)
}

// writeFrame writes m length-prefixed.
func writeFrame(c net.Conn, m *dns.Msg) error {
	b, err := m.Pack()
	if err != nil {
		return err
	}
	_, err = c.Write(append([]byte{byte(len(b) >> 8), byte(len(b))}, b...))
	return err
}

// addrReply answers req with one A record whose address encodes the first
// label's number ("q7.example." -> 192.0.2.7).
func addrReply(req *dns.Msg) *dns.Msg {
	m := new(dns.Msg)
	m.SetReply(req)
	m.RecursionAvailable = true
	var n int
	_, _ = fmt.Sscanf(req.Question[0].Name, "q%d.", &n)
	rr, _ := dns.NewRR(fmt.Sprintf("%s 60 IN A 192.0.2.%d", req.Question[0].Name, n))
	m.Answer = append(m.Answer, rr)
	return m
}

// echoDoT answers every query on the connection at once.
func echoDoT(c net.Conn) {
	for {
		req, err := readFrame(c)
		if err != nil {
			return
		}
		if writeFrame(c, addrReply(req)) != nil {
			return
		}
	}
}

// TestDoTPipelining: concurrent queries share one connection, the server
// answers them in reverse order, and each query gets its own reply (matched
// by ID, not by order).
func TestDoTPipelining(t *testing.T) {
	const n = 8
	srv := newDoTServer(t, func(c net.Conn) {
		var reqs []*dns.Msg
		for len(reqs) < n {
			req, err := readFrame(c)
			if err != nil {
				return
			}
			reqs = append(reqs, req)
		}
		for i := len(reqs) - 1; i >= 0; i-- {
			if writeFrame(c, addrReply(reqs[i])) != nil {
				return
			}
		}
		echoDoT(c)
	})
	r, _ := newTestResolver(t, Config{
		Upstreams: []string{"tls://" + srv.Addr + "@dns.test"},
		TLS:       &tls.Config{RootCAs: srv.Roots},
		CacheSize: -1,
		Timeout:   time.Minute, // a loaded machine must not start second tries
	})
	got := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			b, _, err := r.AppendReply(context.Background(), nil, qwire(t, fmt.Sprintf("q%d.example.", i+1), dns.TypeA))
			if err != nil {
				got[i] = err.Error()
				return
			}
			m := new(dns.Msg)
			if err := m.Unpack(b); err != nil || len(m.Answer) != 1 {
				got[i] = fmt.Sprintf("bad reply %v %v", err, m)
				return
			}
			got[i] = m.Answer[0].(*dns.A).A.String()
		})
	}
	wg.Wait()
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("192.0.2.%d", i+1))
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("answers (-want +got):\n%s", diff)
	}
	if c := srv.Conns.Load(); c != 1 {
		t.Errorf("%d connections for %d pipelined queries, want 1", c, n)
	}
}

// TestDoTReuseAndIdle: sequential queries reuse one connection; with none
// pending it is closed after the idle timeout, and the next query opens a
// new one.
func TestDoTReuseAndIdle(t *testing.T) {
	srv := newDoTServer(t, echoDoT)
	r, _ := newTestResolver(t, Config{
		Upstreams: []string{"tls://" + srv.Addr},
		TLS:       &tls.Config{RootCAs: srv.Roots}, // verified for 127.0.0.1
		CacheSize: -1,
		// Long while reuse is checked: a loaded machine may pause
		// between two queries.
		TLSIdleTimeout: time.Hour,
		Timeout:        time.Minute,
	})
	for i := range 3 {
		if m, _ := ask(t, r, fmt.Sprintf("q%d.example.", i+1), dns.TypeA); len(m.Answer) != 1 {
			t.Fatalf("answer %v", m.Answer)
		}
	}
	if c := srv.Conns.Load(); c != 1 {
		t.Errorf("%d connections for 3 queries in a row, want 1", c)
	}
	pool := r.ups[0].dot
	pool.idle = 100 * time.Millisecond // armed when the next query is done
	ask(t, r, "q4.example.", dns.TypeA)
	for pool.openConns() > 0 { // closed by the idle timeout; the test's timeout bounds this
		time.Sleep(10 * time.Millisecond)
	}
	ask(t, r, "q5.example.", dns.TypeA)
	if c := srv.Conns.Load(); c != 2 {
		t.Errorf("%d connections after an idle close, want 2", c)
	}
}

// TestDoTServerClose: the server closes the connection without answering
// (as one closing an idle connection just as we write); the query is asked
// again on a new connection and answered.
func TestDoTServerClose(t *testing.T) {
	var first atomic.Bool
	srv := newDoTServer(t, func(c net.Conn) {
		if first.CompareAndSwap(false, true) {
			ask := make([]byte, 1)
			_, _ = c.Read(ask) // the query arrived; drop it
			return
		}
		echoDoT(c)
	})
	r, _ := newTestResolver(t, Config{
		Upstreams: []string{"tls://" + srv.Addr + "@localhost"},
		TLS:       &tls.Config{RootCAs: srv.Roots},
		CacheSize: -1,
		Timeout:   time.Minute,
	})
	m, _ := ask(t, r, "q5.example.", dns.TypeA)
	if len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.5" {
		t.Errorf("answer %v, want 192.0.2.5", m.Answer)
	}
	if c := srv.Conns.Load(); c != 2 {
		t.Errorf("%d connections, want 2 (the closed one and the retry's)", c)
	}
}

// TestDoTBadCertificate: a server whose certificate does not verify (wrong
// name, unknown CA) fails the try as kind tls, and the next upstream
// answers.
func TestDoTBadCertificate(t *testing.T) {
	srv := newDoTServer(t, echoDoT)
	plain := newServer(t, answerWith(t, dns.RcodeSuccess, []string{"$QNAME 60 IN A 192.0.2.99"}, nil))
	for _, tc := range []struct {
		name  string
		up    string
		roots *x509.CertPool
	}{
		{name: "wrong name", up: "tls://" + srv.Addr + "@other.test", roots: srv.Roots},
		{name: "unknown CA", up: "tls://" + srv.Addr + "@dns.test", roots: x509.NewCertPool()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, _ := newTestResolver(t, Config{
				Upstreams: []string{tc.up, plain.Addr},
				TLS:       &tls.Config{RootCAs: tc.roots},
				CacheSize: -1,
				Timeout:   time.Minute,
			})
			fixedOrder(r)
			m, _ := ask(t, r, "q1.example.", dns.TypeA)
			if len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.99" {
				t.Errorf("answer %v, want the plain upstream's 192.0.2.99", m.Answer)
			}
			if n := errCount(r, 0, kindTLS); n != 1 {
				t.Errorf("tls errors %v, want 1", n)
			}
		})
	}
}

// TestDoTCancelledQuery: a query that gives up leaves the connection
// usable; the late reply to it is dropped, not handed to another query.
func TestDoTCancelledQuery(t *testing.T) {
	release := make(chan struct{})
	srv := newDoTServer(t, func(c net.Conn) {
		slow, err := readFrame(c) // held back until the test has given up on it
		if err != nil {
			return
		}
		next, err := readFrame(c)
		if err != nil {
			return
		}
		<-release
		_ = writeFrame(c, addrReply(slow))
		_ = writeFrame(c, addrReply(next))
		echoDoT(c)
	})
	r, _ := newTestResolver(t, Config{
		Upstreams: []string{"tls://" + srv.Addr},
		TLS:       &tls.Config{RootCAs: srv.Roots},
		CacheSize: -1,
		Timeout:   time.Minute,
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() {
		_, _, err := r.AppendReply(ctx, nil, qwire(t, "q1.example.", dns.TypeA))
		done <- err
	}()
	for r.ups[0].dot.pending() < 1 {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled query: %v, want context.Canceled", err)
	}
	go func() {
		for r.ups[0].dot.pending() < 1 {
			time.Sleep(5 * time.Millisecond)
		}
		close(release)
	}()
	m, _ := ask(t, r, "q2.example.", dns.TypeA)
	if len(m.Answer) != 1 || m.Answer[0].(*dns.A).A.String() != "192.0.2.2" {
		t.Errorf("answer %v, want 192.0.2.2 (not the cancelled query's)", m.Answer)
	}
	if c := srv.Conns.Load(); c != 1 {
		t.Errorf("%d connections, want 1", c)
	}
}

// openConns returns how many connections are open.
func (p *dotPool) openConns() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

// pending returns the queries waiting for a reply on all connections.
func (p *dotPool) pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.conns {
		k, _ := c.load()
		n += k
	}
	return n
}
