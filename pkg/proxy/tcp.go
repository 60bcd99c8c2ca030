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

// serveConn answers the length-prefixed queries on c in order (RFC 7766
// 6.2.1.1 allows pipelining; answering in order keeps it simple and a
// client matches by ID anyway) until the client closes, idles past
// TCPIdleTimeout, or ctx ends.
func (s *Server) serveConn(ctx context.Context, c *net.TCPConn) {
	stop := context.AfterFunc(ctx, func() { _ = c.Close() })
	defer stop()
	defer c.Close()
	r := bufio.NewReaderSize(c, 4096)
	pkt := make([]byte, maxUDPPacket)
	out := make([]byte, 0, 4096)
	frame := make([]byte, 0, 4096)
	var lenBuf [2]byte
	for {
		if err := c.SetReadDeadline(time.Now().Add(s.cfg.TCPIdleTimeout)); err != nil {
			return
		}
		if _, err := io.ReadFull(r, lenBuf[:]); err != nil {
			return
		}
		n := int(binary.BigEndian.Uint16(lenBuf[:]))
		if _, err := io.ReadFull(r, pkt[:n]); err != nil {
			return
		}
		reply := s.h.Serve(ctx, out, pkt[:n], TCP)
		if reply == nil {
			continue
		}
		if cap(reply) > cap(out) {
			out = reply[:0]
		}
		// One write per reply: the length and the message in one segment.
		frame = append(frame[:0], byte(len(reply)>>8), byte(len(reply)))
		frame = append(frame, reply...)
		if err := c.SetWriteDeadline(time.Now().Add(s.cfg.TCPIdleTimeout)); err != nil {
			return
		}
		if _, err := c.Write(frame); err != nil {
			return
		}
	}
}
