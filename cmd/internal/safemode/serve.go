package safemode

import (
	"encoding/binary"
	"io"
	"net"
	"time"

	"github.com/miekg/dns"
)

// maxInflight bounds the UDP answers being made at once, across the
// sockets: beyond it the readers wait and queries wait in the socket
// queues, so safe mode's memory stays bounded under a flood (each costs a
// goroutine, the query and the upstream's reply: about 20 kB at most).
const maxInflight = 128

// tcpIdle is how long a TCP connection may wait for its next query.
const tcpIdle = 10 * time.Second

func (s *Server) serveUDP(e *episode, pc net.PacketConn) {
	defer e.readers.Done()
	// A query over UDP fits 4096 bytes (EDNS's usual buffer size, the
	// agent's too); a longer datagram is not a query safe mode answers.
	buf := make([]byte, dns.DefaultMsgSize)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			if e.isDone() {
				return
			}
			continue // a transient error (ICMP feedback): keep reading
		}
		q := append([]byte(nil), buf[:n]...)
		// A query read as the episode stops is still answered (the
		// answers being made are sent): a select on both would drop it
		// half the time. Only a reader that must wait for room gives up.
		select {
		case e.sem <- struct{}{}:
		default:
			select {
			case e.sem <- struct{}{}:
			case <-e.stopped:
				return // the query read is lost, as one a crashing agent read
			}
		}
		e.answers.Add(1)
		go func() {
			defer func() { <-e.sem; e.answers.Done() }()
			if out := s.answer(e.mode, q, "udp"); out != nil {
				pc.WriteTo(out, from)
			}
		}()
	}
}

// maxConns bounds the TCP connections served at once, across the
// listeners: beyond it new ones wait in the listen backlog.
const maxConns = 64

func (s *Server) serveTCP(e *episode, l net.Listener) {
	defer e.readers.Done()
	for {
		select {
		case e.connSem <- struct{}{}:
		case <-e.stopped:
			return
		}
		c, err := l.Accept()
		if err != nil {
			<-e.connSem
			if e.isDone() {
				return
			}
			time.Sleep(10 * time.Millisecond) // out of descriptors: let some close
			continue
		}
		if !e.track(c) {
			<-e.connSem
			c.Close()
			return
		}
		e.answers.Add(1)
		go func() {
			defer func() { <-e.connSem; e.answers.Done() }()
			defer e.untrack(c)
			s.serveConn(e, c)
		}()
	}
}

// serveConn answers the queries of one TCP connection in turn (RFC 7766
// framing: a two-byte length before each message) until the episode
// stops: the client then asks again on a new connection, which the agent
// accepts.
func (s *Server) serveConn(e *episode, c net.Conn) {
	var l [2]byte
	for {
		if !e.setReadDeadline(c, time.Now().Add(tcpIdle)) {
			return
		}
		if _, err := io.ReadFull(c, l[:]); err != nil {
			return
		}
		q := make([]byte, binary.BigEndian.Uint16(l[:]))
		if _, err := io.ReadFull(c, q); err != nil {
			return
		}
		out := s.answer(e.mode, q, "tcp")
		if out == nil {
			return
		}
		c.SetWriteDeadline(time.Now().Add(tcpIdle))
		if _, err := c.Write(append(binary.BigEndian.AppendUint16(nil, uint16(len(out))), out...)); err != nil {
			return
		}
	}
}

// setReadDeadline sets c's read deadline unless the episode is stopping
// (stop's own deadline must stay), and reports whether it did.
func (e *episode) setReadDeadline(c net.Conn, t time.Time) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return false
	}
	c.SetReadDeadline(t)
	return true
}

func (e *episode) isDone() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.done
}

// track notes an open connection, false once the episode is stopping.
func (e *episode) track(c net.Conn) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.done {
		return false
	}
	e.conns[c] = struct{}{}
	return true
}

func (e *episode) untrack(c net.Conn) {
	e.mu.Lock()
	delete(e.conns, c)
	e.mu.Unlock()
	c.Close()
}

// answer returns the reply to the query q, or nil to drop it (not a DNS
// query at all).
func (s *Server) answer(mode Mode, q []byte, proto string) []byte {
	req := new(dns.Msg)
	if err := req.Unpack(q); err != nil || req.Response || len(req.Question) != 1 {
		s.metrics.query("dropped")
		return nil
	}
	var resp *dns.Msg
	switch {
	case mode.Refusing():
		resp = new(dns.Msg).SetRcode(req, dns.RcodeRefused)
		s.metrics.query("refused")
	default:
		resp = s.forward(mode.Upstreams, req, proto)
	}
	out, err := resp.Pack()
	if err != nil {
		return nil
	}
	return out
}

// forward asks the upstreams in turn, each with a fresh random ID, and
// returns the first reply to the question asked, under the client's ID;
// SERVFAIL when none answers.
func (s *Server) forward(upstreams []string, req *dns.Msg, proto string) *dns.Msg {
	c := &dns.Client{Net: proto, Timeout: s.cfg.Timeout}
	id := req.Id
	for _, u := range upstreams {
		q := req.Copy()
		q.Id = dns.Id()
		r, _, err := c.Exchange(q, u)
		if err != nil || r.Id != q.Id || len(r.Question) != 1 || !sameQuestion(r.Question[0], q.Question[0]) {
			continue
		}
		r.Id = id
		s.metrics.query("forwarded")
		return r
	}
	s.metrics.query("servfail")
	return new(dns.Msg).SetRcode(req, dns.RcodeServerFailure)
}

func sameQuestion(a, b dns.Question) bool {
	return a.Qtype == b.Qtype && a.Qclass == b.Qclass && dns.CanonicalName(a.Name) == dns.CanonicalName(b.Name)
}
