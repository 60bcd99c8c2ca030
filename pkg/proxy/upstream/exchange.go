package upstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/metric"
	"github.com/meshdns/meshdns/pkg/proxy/upstream/cache"
)

// ednsSize is the UDP payload size we advertise upstream.
const ednsSize = dnswire.EDNSSize

// upstream is one configured server with its metric children.
type upstream struct {
	addr     string         // Addr.String(): host:port for plain DNS
	ip       netip.AddrPort // the server's IP and port
	dot      *dotPool
	duration *metric.Histogram
	errs     map[string]*metric.Counter // by kind; fixed after New
}

// newUpstream makes the upstream for a, its metric children and, for DNS
// over TLS, its (still empty) connection pool.
func (r *Resolver) newUpstream(a Addr) *upstream {
	up := &upstream{
		addr:     a.String(),
		ip:       netip.MustParseAddrPort(a.HostPort),
		duration: r.metrics.duration.With(a.String()),
		errs:     make(map[string]*metric.Counter, len(errorKinds)),
	}
	for _, k := range errorKinds {
		if k != kindTLS || a.TLS { // no tls series for plain upstreams
			up.errs[k] = r.metrics.errors.With(up.addr, k)
		}
	}
	if a.TLS {
		up.dot = newDoTPool(a, r.cfg.TLS, r.cfg.TLSIdleTimeout, r.cfg.MaxTLSConns, dotMaxPending)
	}
	return up
}

// tryError is a failed try; kind is a metric label value.
type tryError struct {
	kind string
	err  error
}

func (e *tryError) Error() string { return e.kind + ": " + e.err.Error() }
func (e *tryError) Unwrap() error { return e.err }

// bufPool holds the buffers of tries: the EDNS size we ask upstreams for,
// plus one byte to tell a datagram bigger than asked for (the kernel cuts
// it to the buffer) from one that fits. With many queries in flight to a
// slow upstream (two tries each while both listen) these are most of the
// forwarding memory: 1.2 KiB a try where 64 KiB was. A TCP reply longer
// than this gets a buffer of its own length.
var bufPool = sync.Pool{New: func() any { b := make([]byte, ednsSize+1); return &b }}

// appendQuery appends a query for the question q (wire form) with the given
// ID, RD set and, with edns, an OPT record advertising ednsSize.
func appendQuery(dst []byte, id uint16, q []byte, edns bool) []byte {
	var arcount byte
	if edns {
		arcount = 1
	}
	dst = append(dst, byte(id>>8), byte(id), 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, arcount)
	dst = append(dst, q...)
	if !edns {
		return dst
	}
	return dnswire.AppendOPT(dst, ednsSize, 0, false)
}

// checkReply decides whether b answers our query (id, question q whose name
// is the first nameLen bytes, lowercased). It returns "" for a reply to take,
// kindTruncated for one with TC set, or the kind to count and ignore.
func checkReply(b []byte, id uint16, q []byte, nameLen int) string {
	if len(b) < 12 {
		return kindGarbage
	}
	if binary.BigEndian.Uint16(b) != id || b[2]&0x80 == 0 {
		return kindMismatch
	}
	if binary.BigEndian.Uint16(b[4:]) != 1 || len(b) < 12+len(q) {
		return kindMismatch
	}
	got := b[12 : 12+len(q)]
	if !dnswire.EqualFold(got[:nameLen], q[:nameLen]) || string(got[nameLen:]) != string(q[nameLen:]) {
		return kindMismatch
	}
	if b[2]&0x02 != 0 {
		return kindTruncated
	}
	return ""
}

// reply is an upstream's acceptable answer, ready to serve and cache.
type reply struct {
	e         *cache.Entry
	cacheable bool
	rcode     int
	from      string     // the upstream's address
	fwd       *Forwarded // the exchange, or nil when not recorded
}

// try runs one try against up: UDP from a fresh socket, TCP when truncated.
// A reply that cannot be turned into a servable entry counts as garbage.
// With record, the reply carries the exchange it came from.
func (r *Resolver) try(ctx context.Context, up *upstream, q []byte, nameLen int, record bool) (reply, error) {
	a := attempt{up: up, start: time.Now(), rec: newRecord(record)}
	// One deadline for the whole try, TCP retry included: the end of the
	// forward's window, so a late reply is still taken. forward's ctx
	// carries it already; a second timer for the same instant would be
	// one more per query.
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, r.deadline(ctx))
		defer cancel()
	}
	exchange := r.exchangeUDP
	if up.dot != nil {
		exchange = r.exchangeDoT
	}
	m, err := exchange(ctx, up, q, nameLen, true, a.rec)
	return r.settle(ctx, a, q, nameLen, m, err)
}

// attempt is one try under way: its upstream, when it started and the
// exchange it records (or nil).
type attempt struct {
	up    *upstream
	start time.Time
	rec   *Forwarded
}

// newRecord is the record of a try's exchange when record asks for one,
// else nil.
func newRecord(record bool) *Forwarded {
	if record {
		return new(Forwarded)
	}
	return nil
}

// retries reports whether a try whose first exchange came back with m and
// err asks again (settle): FORMERR from a server without EDNS, or a
// truncated reply.
func retries(m upReply, err error) bool {
	if err == nil {
		return m.rcode == dns.RcodeFormatError && !m.edns
	}
	return kindOf(err) == kindTruncated
}

// kindOf is the kind of a tryError in err's chain, or "". Only called with
// an error: the target errors.As needs escapes, an allocation a try
// without error does not pay.
func kindOf(err error) string {
	var te *tryError
	if errors.As(err, &te) {
		return te.kind
	}
	return ""
}

// settle finishes try a from what its first exchange came back with: the
// question asked again without EDNS of a server that does not know it or
// over TCP for a truncated reply, the try's duration and error counted,
// and the reply turned into an entry. It releases m.
func (r *Resolver) settle(ctx context.Context, a attempt, q []byte, nameLen int, m upReply, err error) (reply, error) {
	defer func() { m.release() }()
	up := a.up
	if err == nil && m.rcode == dns.RcodeFormatError && !m.edns {
		// RFC 6891 section 7: a server that does not know EDNS answers
		// FORMERR without OPT; ask again without it, in the same try.
		up.errs[kindFormerr].Inc()
		m.release()
		exchange := r.exchangeUDP
		if up.dot != nil {
			exchange = r.exchangeDoT
		}
		m, err = exchange(ctx, up, q, nameLen, false, a.rec)
	}
	if err != nil && kindOf(err) == kindTruncated {
		up.errs[kindTruncated].Inc()
		m, err = r.exchangeTCP(ctx, up, q, nameLen, a.rec)
	}
	up.duration.Observe(time.Since(a.start).Seconds())
	var rep reply
	if err == nil {
		if m.rcode == dns.RcodeServerFailure || m.rcode == dns.RcodeRefused {
			err = &tryError{kindRcode, fmt.Errorf("upstream %s answered %s", up.addr, dns.RcodeToString[m.rcode])}
		} else {
			rep = reply{rcode: m.rcode, from: up.addr, fwd: a.rec}
			if rep.e, rep.cacheable, err = r.makeEntry(m, q, nameLen, r.now()); err != nil {
				err = &tryError{kindGarbage, fmt.Errorf("reply from %s: %w", up.addr, err)}
			}
		}
	}
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			// Close, a lost race, or a later try answered first: not
			// the upstream's fault, unless it had been silent for a
			// whole Timeout, which a dead upstream always is.
			if m.b == nil && m.msg == nil && time.Since(a.start) >= r.cfg.Timeout {
				up.errs[kindTimeout].Inc()
			}
			return reply{}, ctx.Err()
		}
		if kind := kindOf(err); kind != "" {
			up.errs[kind].Inc()
		}
		return reply{}, err
	}
	return rep, nil
}

// deadline is ctx's deadline (forward's window), or now plus the window
// when ctx has none.
func (r *Resolver) deadline(ctx context.Context) time.Time {
	if cd, ok := ctx.Deadline(); ok {
		return cd
	}
	return time.Now().Add(r.cfg.window)
}

// ioError classifies a socket error; a passed deadline is a timeout.
func ioError(op string, up *upstream, err error) error {
	kind := kindNetwork
	if errors.Is(err, os.ErrDeadlineExceeded) {
		kind = kindTimeout
	}
	return &tryError{kind, fmt.Errorf("%s %s: %w", op, up.addr, err)}
}

// exchangeUDP sends the query (with OPT when edns) from a new socket (so a new random source port,
// RFC 5452 section 9.2) and reads until a matching reply or the deadline.
// Replies with the wrong ID or question are counted and ignored: a spoofer
// racing the real server does not end the wait. rec, when not nil, gets
// the exchange.
func (r *Resolver) exchangeUDP(ctx context.Context, up *upstream, q []byte, nameLen int, edns bool, rec *Forwarded) (upReply, error) {
	x, err := r.sendUDP(ctx, up, q, edns, rec, r.deadline(ctx))
	if err != nil {
		return upReply{}, err
	}
	defer x.close(r)
	return r.awaitUDP(ctx, x, up, q, nameLen, rec)
}

// udpQuery is a query sent over UDP from its own socket, waiting for its
// reply.
type udpQuery struct {
	conn      net.Conn    // dialUDP's
	interrupt func()      // ends a blocked read or write at once
	stop      func() bool // unhooks interrupt from ctx's end
	bp        *[]byte     // from bufPool: the query, then the reply; nil once a reply took it
	id        uint16
}

// close releases the buffer (unless a reply took it) and hands the socket
// to r's closer.
func (x *udpQuery) close(r *Resolver) {
	x.stop()
	if x.bp != nil {
		bufPool.Put(x.bp)
	}
	r.closer.add(r.ctx, &r.wg, x.conn)
}

// errSoftDeadline: no reply before the read deadline a udpQuery was sent
// with, which comes before the end of the forward's window (forward's
// first try, which waits alone only until Timeout); internal.
var errSoftDeadline = errors.New("no reply yet")

// sendUDP sends the query (with OPT when edns) to up from a new socket,
// whose reads and writes end at until (at the latest ctx's deadline) or
// at ctx's end. rec, when not nil, gets the query.
func (r *Resolver) sendUDP(ctx context.Context, up *upstream, q []byte, edns bool, rec *Forwarded, until time.Time) (*udpQuery, error) {
	conn, err := dialUDP(up.ip)
	if err != nil {
		return nil, &tryError{kindNetwork, fmt.Errorf("dial udp %s: %w", up.addr, err)}
	}
	// Close (via ctx) interrupts a blocked read at once.
	interrupt := func() { _ = conn.SetDeadline(time.Unix(1, 0)) }
	x := &udpQuery{conn: conn, interrupt: interrupt, stop: context.AfterFunc(ctx, interrupt), bp: bufPool.Get().(*[]byte), id: uint16(rand.Uint32())}
	if err := conn.SetDeadline(until); err != nil {
		x.close(r)
		return nil, ioError("deadline udp", up, err)
	}
	query := appendQuery((*x.bp)[:0], x.id, q, edns)
	if _, err := conn.Write(query); err != nil {
		x.close(r)
		return nil, ioError("write udp", up, err)
	}
	rec.sent(TransportUDP, conn, up, query)
	return x, nil
}

// awaitUDP reads x's socket until a reply to its query, ctx's end or the
// deadline x was sent with: errSoftDeadline when that comes before ctx's
// deadline. A reply with the wrong ID or question, or one that does not
// unpack, is counted and ignored. The reply takes x's buffer.
func (r *Resolver) awaitUDP(ctx context.Context, x *udpQuery, up *upstream, q []byte, nameLen int, rec *Forwarded) (upReply, error) {
	buf := *x.bp
	for {
		n, err := x.conn.Read(buf)
		if err != nil {
			// Cancelled (Close, or a lost race) is not the upstream's
			// fault; a passed deadline is a timeout, unless the
			// window still runs.
			if errors.Is(ctx.Err(), context.Canceled) {
				return upReply{}, ctx.Err()
			}
			if cd, ok := ctx.Deadline(); ok && errors.Is(err, os.ErrDeadlineExceeded) && ctx.Err() == nil && time.Now().Before(cd) {
				return upReply{}, errSoftDeadline
			}
			return upReply{}, ioError("read udp", up, err)
		}
		kind := checkReply(buf[:n], x.id, q, nameLen)
		if kind == "" && n > ednsSize {
			// Our reply, bigger than the size we asked for and cut to
			// our buffer: ask over TCP as for TC.
			kind = kindTruncated
		}
		switch kind {
		case "":
		case kindTruncated:
			return upReply{}, &tryError{kindTruncated, fmt.Errorf("udp reply from %s truncated", up.addr)}
		default:
			up.errs[kind].Inc()
			r.debug("ignored upstream reply", q, "upstream", up.addr, "err", kind)
			continue
		}
		m, err := acceptReply(buf[:n], x.bp, q, nameLen)
		if err != nil {
			up.errs[kindGarbage].Inc()
			r.debug("ignored upstream reply", q, "upstream", up.addr, "err", kindGarbage)
			continue
		}
		x.bp = nil // m's now
		rec.received(buf[:n])
		return m, nil
	}
}

// exchangeTCP asks up over TCP, for a reply that did not fit in UDP. The
// connection is not reused: truncation is rare and a fresh one needs no
// pipelining bookkeeping. rec, when not nil, gets the exchange.
func (r *Resolver) exchangeTCP(ctx context.Context, up *upstream, q []byte, nameLen int, rec *Forwarded) (upReply, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", up.addr)
	if err != nil {
		return upReply{}, &tryError{kindNetwork, fmt.Errorf("dial tcp %s: %w", up.addr, err)}
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if err := conn.SetDeadline(r.deadline(ctx)); err != nil {
		return upReply{}, ioError("deadline tcp", up, err)
	}

	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	id := uint16(rand.Uint32())
	msg := appendQuery(buf[:2], id, q, true)
	binary.BigEndian.PutUint16(msg, uint16(len(msg)-2))
	if _, err := conn.Write(msg); err != nil {
		return upReply{}, ioError("write tcp", up, err)
	}
	rec.sent(TransportTCP, conn, up, msg[2:])
	if _, err := io.ReadFull(conn, buf[:2]); err != nil {
		return upReply{}, ioError("read tcp", up, err)
	}
	n := int(binary.BigEndian.Uint16(buf))
	if n > len(buf) {
		buf = make([]byte, n) // rare: grows for this reply only
	}
	if _, err := io.ReadFull(conn, buf[:n]); err != nil {
		return upReply{}, ioError("read tcp", up, err)
	}
	// Over TCP nobody can race the server, so anything but our reply is the
	// server misbehaving: fail the try rather than wait.
	switch kind := checkReply(buf[:n], id, q, nameLen); kind {
	case "", kindTruncated: // TC over TCP: take what came
	default:
		return upReply{}, &tryError{kind, fmt.Errorf("tcp reply from %s: %s", up.addr, kind)}
	}
	// Rare enough that the reply gets bytes of its own rather than the
	// pooled buffer.
	m, err := acceptReply(slices.Clone(buf[:n]), nil, q, nameLen)
	if err != nil {
		return upReply{}, &tryError{kindGarbage, fmt.Errorf("tcp reply from %s: %w", up.addr, err)}
	}
	rec.received(buf[:n])
	return m, nil
}

// exchangeDoT asks up over its DNS-over-TLS connections. As over TCP,
// nobody can race the server, so a reply to another question fails the try.
// rec, when not nil, gets the exchange.
func (r *Resolver) exchangeDoT(ctx context.Context, up *upstream, q []byte, nameLen int, edns bool, rec *Forwarded) (upReply, error) {
	query := appendQuery(make([]byte, 0, 12+len(q)+11), 0, q, edns)
	rec.sent(TransportDoT, nil, up, query)
	b, err := up.dot.exchange(ctx, query)
	if err != nil {
		var te *tryError
		switch {
		case errors.Is(ctx.Err(), context.Canceled):
			return upReply{}, ctx.Err()
		case errors.As(err, &te):
			return upReply{}, err
		case errors.Is(err, context.DeadlineExceeded):
			return upReply{}, &tryError{kindTimeout, fmt.Errorf("dns over tls %s: %w", up.addr, err)}
		}
		return upReply{}, &tryError{kindNetwork, err}
	}
	switch kind := checkReply(b, binary.BigEndian.Uint16(b), q, nameLen); kind {
	case "", kindTruncated: // TC over TLS: take what came
	default:
		return upReply{}, &tryError{kind, fmt.Errorf("tls reply from %s: %s", up.addr, kind)}
	}
	m, err := acceptReply(b, nil, q, nameLen)
	if err != nil {
		return upReply{}, &tryError{kindGarbage, fmt.Errorf("tls reply from %s: %w", up.addr, err)}
	}
	rec.received(b)
	if rec != nil {
		// The pool wrote its own ID on the wire: the reply's.
		copy(rec.Query, b[:2])
	}
	return m, nil
}
