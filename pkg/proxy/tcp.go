package proxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/proxy/observe"
)

// serveTCP accepts connections until l is closed. At MaxTCPConns (or a
// client's MaxTCPConnsPerClient) the connection idle the longest makes
// room (tcpconns.go); when every one has a query in progress the new one is
// closed at once: a client holding many connections must not exhaust the
// agent (RFC 7766 6.2.2).
func (s *Server) serveTCP(ctx context.Context, wg *sync.WaitGroup, l *net.TCPListener) {
	var backoff time.Duration
	for {
		c, err := l.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
				return
			}
			// Out of file descriptors and the like: slow down instead of
			// spinning, as net/http does.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accept tcp", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-ctx.Done():
				return
			}
			continue
		}
		backoff = 0
		tc, res := s.tcpConns.admit(c, time.Now())
		switch res {
		case refusedClient, refusedTotal:
			s.h.obs.Drop(TCP, observe.DropTCPLimit)
			_ = c.Close()
			continue
		case admittedReclaimed:
			s.h.obs.Drop(TCP, observe.DropTCPReclaimed)
		}
		s.h.obs.TCPConn(1)
		wg.Go(func() {
			defer func() {
				s.tcpConns.remove(tc)
				s.h.obs.TCPConn(-1)
			}()
			s.serveConn(ctx, tc)
		})
	}
}

// tcpInflight bounds the forwarded queries one connection may have
// waiting for the Resolver; the connection stops reading beyond it.
const tcpInflight = 16

// serveConn answers the length-prefixed queries on c (RFC 7766 6.2.1.1
// pipelining) until the client closes, idles past TCPIdleTimeout, the
// connection is MaxTCPConnAge old (it then takes no further query, answers
// those it has and closes: a client may not keep a slot forever by
// sending a query now and then), it is reclaimed for a newcomer, or ctx
// ends. Table answers and Resolver cache hits are written in order from
// this goroutine; queries that wait for an upstream are answered by their
// own goroutine when ready, out of order (RFC 7766 7: clients match by ID),
// so one slow name does not hold up the rest of the pipeline.
func (s *Server) serveConn(ctx context.Context, tc *tcpConn) {
	c := tc.c
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	defer c.Close()
	w := &tcpWriter{c: c, timeout: s.cfg.TCPIdleTimeout, frame: make([]byte, 0, 4096)}
	var inflight sync.WaitGroup
	defer inflight.Wait() // before Close: pending answers still go out
	sem := make(chan struct{}, tcpInflight)

	br := bufio.NewReaderSize(c, 4096)
	// Grown on demand: a connection costs 512 bytes here, not 64 KiB, and
	// queries are rarely larger.
	pkt := make([]byte, dnswire.MinUDPSize)
	out := make([]byte, 0, 4096)
	var lenBuf [2]byte
	// A random phase for the 1-in-N answer timing (Handler.answer): a
	// connection carries a query or two, and counting from zero would
	// time none of them.
	q := query{tick: rand.Uint32(), req: request{addrs: observe.Addrs{Client: addrPort(c.RemoteAddr()), Server: addrPort(c.LocalAddr())}}}
	retire := tc.born.Add(s.cfg.MaxTCPConnAge)
	for {
		deadline := time.Now().Add(s.cfg.TCPIdleTimeout)
		if deadline.After(retire) {
			deadline = retire
		}
		if err := c.SetReadDeadline(deadline); err != nil {
			return
		}
		// After the deadline is set: Drain sets draining before it sets
		// every connection's deadline to now, so one of the two stops us.
		if s.draining.Load() {
			return
		}
		if _, err := io.ReadFull(br, lenBuf[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(lenBuf[:]))
		if n > len(pkt) {
			pkt = make([]byte, n)
		}
		if _, err := io.ReadFull(br, pkt[:n]); err != nil {
			return
		}
		if !tc.begin() {
			return // reclaimed for a newcomer
		}
		reply, wait := s.h.answer(out, pkt[:n], TCP, &q)
		if wait {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				tc.end()
				return
			}
			moved := q.moved(nil)
			inflight.Go(func() {
				defer func() { <-sem }()
				if !w.write(s.h.resolve(ctx, nil, &moved)) {
					s.h.obs.Drop(TCP, observe.DropSendFailed)
				}
				tc.end()
			})
			continue
		}
		ok := reply == nil || w.write(reply)
		if !ok {
			s.h.obs.Drop(TCP, observe.DropSendFailed)
		}
		tc.end()
		if reply != nil && cap(reply) > cap(out) {
			out = reply[:0]
		}
		if !ok {
			return
		}
	}
}

// tcpWriter serializes the replies of one connection.
type tcpWriter struct {
	mu      sync.Mutex // guards following
	c       *net.TCPConn
	timeout time.Duration
	frame   []byte
	failed  bool
}

// write sends one length-prefixed reply in one segment; false once the
// connection failed.
func (w *tcpWriter) write(reply []byte) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failed {
		return false
	}
	w.frame = append(w.frame[:0], byte(len(reply)>>8), byte(len(reply)))
	w.frame = append(w.frame, reply...)
	if err := w.c.SetWriteDeadline(time.Now().Add(w.timeout)); err != nil {
		w.failed = true
		return false
	}
	if _, err := w.c.Write(w.frame); err != nil {
		w.failed = true
		_ = w.c.Close() // unblocks the reader
		return false
	}
	return true
}
