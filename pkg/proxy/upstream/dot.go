package upstream

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// DNS over TLS (RFC 7858) keeps a few long-lived connections per upstream
// and pipelines queries on them (RFC 7766 section 6.2.1.1): each query gets
// an ID unique on its connection, one reader goroutine per connection hands
// every reply to the query with its ID, in whatever order the server
// answers. A connection idle for IdleTimeout is closed by us; one the server
// closes fails its pending queries, which are asked again once on a new
// connection (the server may close an idle connection just as we write).

// dotMaxPending is how many queries one connection carries before another
// is opened (while MaxTLSConns allows).
const dotMaxPending = 64

var (
	errConnClosed = errors.New("dns over tls connection closed")
	errPoolClosed = errors.New("dns over tls upstream closed")
)

// dotPool is the connections to one DNS-over-TLS upstream.
type dotPool struct {
	addr     string // host:port
	tls      *tls.Config
	idle     time.Duration
	maxConns int
	// maxPending is the queries one connection carries before another is
	// opened (while fewer than maxConns are open).
	maxPending int
	dial       func(ctx context.Context, network, addr string) (net.Conn, error)

	mu      sync.Mutex // guards following
	conns   []*dotConn
	dialing int // connections being opened, counted against maxConns
	// dialDone is closed when dialing drops to zero; waiters for a first
	// connection select on it.
	dialDone chan struct{}
	closed   bool
	wg       sync.WaitGroup // the readers
}

// dotConn is one TLS connection with its pending queries.
type dotConn struct {
	pool *dotPool
	c    net.Conn // *tls.Conn

	wmu sync.Mutex // serialises writes (one frame at a time)

	mu      sync.Mutex             // guards following
	pending map[uint16]chan []byte // by query ID; a reply or nil for a dead connection
	dead    error                  // why the connection is gone, or nil
	nextID  uint16                 // the last ID given out
}

func newDoTPool(addr Addr, base *tls.Config, idle time.Duration, maxConns, maxPending int) *dotPool {
	cfg := base.Clone()
	cfg.ServerName = addr.ServerName
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(addr.HostPort)
		cfg.ServerName = host // checked against the certificate's IP SANs
	}
	if cfg.MinVersion == 0 {
		cfg.MinVersion = tls.VersionTLS12 // RFC 8310 section 8.1 wants TLS 1.2 at least
	}
	if cfg.ClientSessionCache == nil {
		// Reconnects after an idle close resume the session: one round
		// trip less (RFC 7858 section 3.4).
		cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)
	}
	p := &dotPool{addr: addr.HostPort, tls: cfg, idle: idle, maxConns: maxConns, maxPending: maxPending}
	var d net.Dialer
	p.dial = d.DialContext
	return p
}

// exchange sends the query msg (a DNS message whose first two bytes, the
// ID, are overwritten) and returns the reply with the same ID, or fails at
// ctx's end. A query lost to a connection the server closed before
// answering anything on it is asked again once on another connection.
func (p *dotPool) exchange(ctx context.Context, msg []byte) ([]byte, error) {
	for retry := 0; ; retry++ {
		c, err := p.get(ctx, retry > 0)
		if err != nil {
			return nil, err
		}
		b, err := c.exchange(ctx, msg)
		if errors.Is(err, errConnClosed) && retry == 0 && ctx.Err() == nil {
			continue
		}
		return b, err
	}
}

// get returns a connection to send on: the least busy open one while it
// has room, else a new one while MaxTLSConns allows, else the least busy.
// Queries that find no connection while one is being opened wait for it
// rather than each opening their own. fresh asks for a new connection
// (within the bound).
func (p *dotPool) get(ctx context.Context, fresh bool) (*dotConn, error) {
	for {
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			return nil, errPoolClosed
		}
		var best *dotConn
		bestN := 0
		for _, c := range p.conns {
			if n, ok := c.load(); ok && (best == nil || n < bestN) {
				best, bestN = c, n
			}
		}
		canDial := len(p.conns)+p.dialing < p.maxConns
		switch {
		case best != nil && bestN < p.maxPending && !fresh:
			p.mu.Unlock()
			return best, nil
		case canDial && (p.dialing == 0 || fresh):
			return p.dialLocked(ctx)
		case best != nil:
			p.mu.Unlock()
			return best, nil
		}
		wait := p.dialDone // not nil: dialing > 0 here
		p.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// dialLocked opens a new connection and adds it to the pool. It is called
// with p.mu held and returns with it released.
func (p *dotPool) dialLocked(ctx context.Context) (*dotConn, error) {
	if p.dialing == 0 {
		p.dialDone = make(chan struct{})
	}
	p.dialing++
	p.mu.Unlock()

	c, err := p.open(ctx)

	p.mu.Lock()
	defer p.mu.Unlock()
	if p.dialing--; p.dialing == 0 {
		close(p.dialDone)
	}
	if err != nil {
		return nil, err
	}
	if p.closed {
		c.c.Close()
		return nil, errPoolClosed
	}
	p.conns = append(p.conns, c)
	p.wg.Go(c.read)
	return c, nil
}

// open dials and finishes the TLS handshake within ctx.
func (p *dotPool) open(ctx context.Context) (*dotConn, error) {
	raw, err := p.dial(ctx, "tcp", p.addr)
	if err != nil {
		return nil, &tryError{kindNetwork, fmt.Errorf("dial tls %s: %w", p.addr, err)}
	}
	tc := tls.Client(raw, p.tls)
	if err := tc.HandshakeContext(ctx); err != nil {
		raw.Close()
		return nil, &tryError{kindTLS, fmt.Errorf("tls handshake %s: %w", p.addr, err)}
	}
	c := &dotConn{pool: p, c: tc, pending: make(map[uint16]chan []byte)}
	_ = tc.SetReadDeadline(time.Now().Add(p.idle))
	return c, nil
}

// remove drops a dead connection from the pool.
func (p *dotPool) remove(c *dotConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.conns {
		if x == c {
			p.conns = append(p.conns[:i], p.conns[i+1:]...)
			return
		}
	}
}

// close closes every connection, failing their pending queries, and waits
// for the readers.
func (p *dotPool) close() {
	p.mu.Lock()
	p.closed = true
	conns := append([]*dotConn(nil), p.conns...)
	p.mu.Unlock()
	for _, c := range conns {
		c.kill(errPoolClosed)
	}
	p.wg.Wait()
}

// load is the connection's pending queries, and false once it is dead.
func (c *dotConn) load() (int, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending), c.dead == nil
}

// exchange sends msg with an ID free on this connection and waits for its
// reply.
func (c *dotConn) exchange(ctx context.Context, msg []byte) ([]byte, error) {
	ch := make(chan []byte, 1)
	c.mu.Lock()
	if c.dead != nil {
		c.mu.Unlock()
		return nil, errConnClosed
	}
	// IDs count up: inside TLS nobody can spoof a reply, and an ID given
	// up on is not reused until 65535 others were, so a late reply to a
	// cancelled query does not reach a new one.
	id := c.nextID
	for {
		id++
		if _, taken := c.pending[id]; !taken {
			break
		}
	}
	c.nextID = id
	c.pending[id] = ch
	if len(c.pending) == 1 {
		// Busy: no idle timeout while a reply is owed.
		_ = c.c.SetReadDeadline(time.Time{})
	}
	c.mu.Unlock()
	defer c.forget(id)

	frame := make([]byte, 2+len(msg))
	binary.BigEndian.PutUint16(frame, uint16(len(msg)))
	copy(frame[2:], msg)
	binary.BigEndian.PutUint16(frame[2:], id)
	c.wmu.Lock()
	dl, _ := ctx.Deadline()
	_ = c.c.SetWriteDeadline(dl)
	_, err := c.c.Write(frame)
	c.wmu.Unlock()
	if err != nil {
		// A write cut short leaves the TLS stream unusable.
		c.kill(fmt.Errorf("%w: write: %w", errConnClosed, err))
		return nil, c.failure(err)
	}
	select {
	case b := <-ch:
		if b == nil {
			c.mu.Lock()
			err := c.dead
			c.mu.Unlock()
			return nil, c.failure(err)
		}
		return b, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// failure is the error of a query whose connection died under it: always
// errConnClosed, so the query is asked once more on another connection. A
// server closing a connection it thinks idle shows as EOF, a reset or a
// broken pipe depending on the timing, none of them the query's fault.
func (c *dotConn) failure(err error) error {
	if errors.Is(err, errConnClosed) {
		return err
	}
	return fmt.Errorf("%w: %s: %w", errConnClosed, c.pool.addr, err)
}

// forget removes a query that got its reply or gave up; the last one out
// arms the idle timeout.
func (c *dotConn) forget(id uint16) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, id)
	if len(c.pending) == 0 && c.dead == nil {
		_ = c.c.SetReadDeadline(time.Now().Add(c.pool.idle))
	}
}

// read hands each reply to the query with its ID until the connection
// fails or stays idle too long. Replies to queries that gave up are
// dropped.
func (c *dotConn) read() {
	var hdr [2]byte
	for {
		_, err := io.ReadFull(c.c, hdr[:])
		if err == nil {
			b := make([]byte, binary.BigEndian.Uint16(hdr[:]))
			if _, err = io.ReadFull(c.c, b); err == nil {
				c.deliver(b)
				continue
			}
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if c.die(errConnClosed, true) {
				return
			}
			continue // a query came in as the idle timer fired
		}
		c.kill(err)
		return
	}
}

// deliver hands b to the query waiting for its ID.
func (c *dotConn) deliver(b []byte) {
	if len(b) < 2 {
		return
	}
	c.mu.Lock()
	ch := c.pending[binary.BigEndian.Uint16(b)]
	delete(c.pending, binary.BigEndian.Uint16(b))
	c.mu.Unlock()
	if ch != nil {
		ch <- b
	}
}

// kill marks the connection dead, closes it and fails its pending queries.
func (c *dotConn) kill(err error) { c.die(err, false) }

// die marks the connection dead (when idleOnly, only if no query is
// pending), closes it and fails its pending queries. It reports whether
// the connection is dead now.
func (c *dotConn) die(err error, idleOnly bool) bool {
	c.mu.Lock()
	if c.dead != nil {
		c.mu.Unlock()
		return true
	}
	if idleOnly && len(c.pending) > 0 {
		c.mu.Unlock()
		return false
	}
	c.dead = err
	pending := c.pending
	c.pending = map[uint16]chan []byte{}
	c.mu.Unlock()
	c.c.Close()
	c.pool.remove(c)
	for _, ch := range pending {
		ch <- nil
	}
	return true
}
