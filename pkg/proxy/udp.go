package proxy

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/proxy/observe"
)

const (
	// maxUDPPacket is the largest UDP payload.
	maxUDPPacket = 65535
	// readerReplyBuf is the initial reply buffer of a UDP reader: a reply
	// to a client advertising the common EDNS sizes (1232, 4096) fits; a
	// bigger one grows it once. Sized for the largest packet, each reader
	// would hold 64 KiB it almost never uses, in every pod.
	readerReplyBuf = 4096
	// workerBuf is the initial reply buffer of a forwarding worker; bigger
	// replies grow it. Most forwarded replies are a few hundred bytes, and
	// a burst leaves up to MaxForwarding workers holding one each.
	workerBuf = 512
	// workerIdle ends a forwarding worker that got no work for this long,
	// so a burst of slow upstream queries does not leave goroutines (and
	// their stacks and buffers) behind for long.
	workerIdle = 5 * time.Second
)

// fwdJob is a request handed from a UDP reader to a forwarding worker.
type fwdJob struct {
	conn *net.UDPConn
	addr netip.AddrPort
	q    query
	// buf keeps the packet copy's storage for the next job.
	buf []byte
}

// serveUDPConn reads queries from c until it is closed, through the net
// package: serveUDP's loop where raw system calls are not available (see
// udp_linux.go). Table answers and Resolver cache hits are written from
// this goroutine, without handing over: that is the path whose CPU per
// query is held next to a plain UDP reflector. Requests that must wait
// (upstream, ExternalName) go, parsed, to workers so a slow upstream never
// delays a table answer.
func (s *Server) serveUDPConn(ctx context.Context, wg *sync.WaitGroup, c *net.UDPConn) {
	s.readers.Add(1)
	defer s.readers.Add(-1)
	buf := make([]byte, maxUDPPacket) // a query of any size is read whole
	out := make([]byte, 0, readerReplyBuf)
	var q query
	q.req.addrs.Server = addrPort(c.LocalAddr())
	for {
		n, addr, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			if s.udpReadDone(ctx, err) {
				return
			}
			continue
		}
		if reply := s.answerUDP(ctx, wg, c, addr, buf[:n], out, &q); reply != nil {
			s.writeUDP(c, reply, addr)
			out = keepGrown(out, reply)
		}
	}
}

// answerUDP answers one datagram read from c: the reply to send now, or
// nil when there is none or a worker sends it (dispatch).
func (s *Server) answerUDP(ctx context.Context, wg *sync.WaitGroup, c *net.UDPConn, addr netip.AddrPort, pkt, out []byte, q *query) []byte {
	q.req.addrs.Client = addr
	reply, wait := s.h.answer(out, pkt, UDP, q)
	if wait {
		s.dispatch(ctx, wg, c, addr, q)
		return nil
	}
	return reply
}

// udpReadDone reports whether a reader's read error ends it: the socket
// closed, ctx done, or (drain.go) the queue read after the divert.
func (s *Server) udpReadDone(ctx context.Context, err error) bool {
	if errors.Is(err, net.ErrClosed) || ctx.Err() != nil {
		return true
	}
	if s.draining.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
		return true // the queue is read: nothing more comes (drain.go)
	}
	s.log.Warn("read udp", "err", err)
	return false
}

// keepGrown returns the reply buffer to use next: reply's storage when an
// answer grew it (up to the largest packet), else out.
func keepGrown(out, reply []byte) []byte {
	if cap(reply) > cap(out) && cap(reply) <= maxUDPPacket {
		return reply[:0]
	}
	return out
}

// writeUDP sends a reply; one the socket refuses (other than after Close)
// is a lost reply, counted.
func (s *Server) writeUDP(c *net.UDPConn, reply []byte, addr netip.AddrPort) {
	if _, err := c.WriteToUDPAddrPort(reply, addr); err != nil && !errors.Is(err, net.ErrClosed) {
		s.h.obs.Drop(UDP, observe.DropSendFailed)
		s.log.Debug("write udp", "err", err)
	}
}

// dispatch hands q to an idle worker, starts one when there is none and
// fewer than MaxForwarding run, or answers REFUSED: shed load rather than
// queue without limit.
func (s *Server) dispatch(ctx context.Context, wg *sync.WaitGroup, c *net.UDPConn, addr netip.AddrPort, q *query) {
	s.pending.Add(1)
	j := s.jobPool.Get().(*fwdJob)
	j.conn, j.addr = c, addr
	j.q = q.moved(j.buf)
	j.buf = j.q.req.Pkt
	select {
	case s.jobs <- j:
		return
	default:
	}
	if s.forwards.Add(1) <= int64(s.cfg.MaxForwarding) {
		wg.Go(func() { s.forwardWorker(ctx, j) })
		return
	}
	s.forwards.Add(-1)
	s.pending.Add(-1)
	j.conn = nil
	s.jobPool.Put(j)
	var out [dnswire.MaxNameLen + 64]byte
	s.writeUDP(c, s.h.refuse(out[:0], q), addr)
}

// forwardWorker resolves j, then further jobs until ctx ends or it idles.
func (s *Server) forwardWorker(ctx context.Context, j *fwdJob) {
	defer s.forwards.Add(-1)
	out := make([]byte, 0, workerBuf)
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		reply := s.h.resolve(ctx, out, &j.q)
		s.sendReply(j.conn, reply, j.addr)
		s.pending.Add(-1)
		out = keepGrown(out, reply)
		j.conn, j.q.dec.chase = nil, nil
		s.jobPool.Put(j)
		idle.Reset(workerIdle)
		select {
		case j = <-s.jobs:
		case <-idle.C:
			return
		case <-ctx.Done():
			return
		}
	}
}
