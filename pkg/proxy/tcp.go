package proxy

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

// serveTCP accepts connections until l is closed. Connections beyond
// MaxTCPConns are closed at once: a client holding many idle connections
// must not exhaust the agent (RFC 7766 6.2.2).
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
		if s.tcpConns.Add(1) > int64(s.cfg.MaxTCPConns) {
			s.tcpConns.Add(-1)
			s.h.m.drop(TCP, dropTCPLimit)
			_ = c.Close()
			continue
		}
		s.h.m.tcpConns.Inc()
		wg.Go(func() {
			defer func() {
				s.tcpConns.Add(-1)
				s.h.m.tcpConns.Dec()
			}()
			s.serveConn(ctx, c)
		})
	}
}

// tcpInflight bounds the forwarded queries one connection may have
// waiting for the Resolver; the connection stops reading beyond it.
const tcpInflight = 16

// serveConn answers the length-prefixed queries on c (RFC 7766 6.2.1.1
// pipelining) until the client closes, idles past TCPIdleTimeout, or ctx
// ends. Table answers and Resolver cache hits are written in order from
// this goroutine; queries that wait for an upstream are answered by their
// own goroutine when ready, out of order (RFC 7766 7: clients match by ID),
// so one slow name does not hold up the rest of the pipeline.
func (s *Server) serveConn(ctx context.Context, c *net.TCPConn) {
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	defer c.Close()
	w := &tcpWriter{c: c, timeout: s.cfg.TCPIdleTimeout, frame: make([]byte, 0, 4096)}
	var inflight sync.WaitGroup
	defer inflight.Wait() // before Close: pending answers still go out
	sem := make(chan struct{}, tcpInflight)

	br := bufio.NewReaderSize(c, 4096)
	pkt := make([]byte, maxUDPPacket)
	out := make([]byte, 0, 4096)
	var lenBuf [2]byte
	var r request
	for {
		if err := c.SetReadDeadline(time.Now().Add(s.cfg.TCPIdleTimeout)); err != nil {
			return
		}
		if _, err := io.ReadFull(br, lenBuf[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(lenBuf[:]))
		if _, err := io.ReadFull(br, pkt[:n]); err != nil {
			return
		}
		reply, wait := s.h.answer(out, pkt[:n], TCP, &r)
		if wait {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			r.start = s.h.clock()
			req := r.moved(nil)
			inflight.Go(func() {
				defer func() { <-sem }()
				w.write(s.h.resolve(ctx, nil, &req))
			})
			continue
		}
		if reply == nil {
			continue
		}
		if cap(reply) > cap(out) {
			out = reply[:0]
		}
		if !w.write(reply) {
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
