package proxy

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// tcpTable holds the open client TCP connections and decides who may
// connect. The bounds are those of the trusted servers (BIND's tcp-clients,
// Unbound's incoming-num-tcp), but reaching one does not lock newcomers
// out: the connection idle the longest is closed to make room (RFC 7766
// 6.2.3 lets a server close idle connections, and clients reconnect), so
// hundreds of connections that each send a query every few seconds cannot
// starve a client that needs TCP now. Only when every connection has a
// query in progress is a new one refused.
type tcpTable struct {
	max, perClient int

	mu    sync.Mutex // guards following
	conns map[*tcpConn]struct{}
	perIP map[netip.Addr]int
}

func newTCPTable(max, perClient int) *tcpTable {
	return &tcpTable{max: max, perClient: perClient, conns: map[*tcpConn]struct{}{}, perIP: map[netip.Addr]int{}}
}

// tcpConn is one client connection.
type tcpConn struct {
	c    *net.TCPConn
	ip   netip.Addr
	born time.Time
	// busy counts queries read and not yet answered; -1 once the
	// connection is reclaimed, after which no query is taken.
	busy atomic.Int32
	// last is when the connection last read a query or wrote a reply
	// (UnixNano): the idle order.
	last atomic.Int64
}

// begin marks a query read; false when the connection was reclaimed.
func (tc *tcpConn) begin() bool {
	for {
		v := tc.busy.Load()
		if v < 0 {
			return false
		}
		if tc.busy.CompareAndSwap(v, v+1) {
			tc.last.Store(time.Now().UnixNano())
			return true
		}
	}
}

// end marks a query answered.
func (tc *tcpConn) end() {
	tc.last.Store(time.Now().UnixNano())
	tc.busy.Add(-1)
}

// admitResult says what admit did.
type admitResult uint8

const (
	admitted admitResult = iota
	admittedReclaimed
	refusedClient // every connection of the client is busy
	refusedTotal  // every connection is busy
)

// admit registers c, closing the longest-idle connection when the client
// or the server is at its bound. The caller serves the returned conn and
// removes it when done; it is nil when c is refused.
func (t *tcpTable) admit(c *net.TCPConn, now time.Time) (*tcpConn, admitResult) {
	var ip netip.Addr
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		ip = a.AddrPort().Addr().Unmap()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	res := admitted
	switch {
	case t.perIP[ip] >= t.perClient:
		if !t.reclaimLocked(ip, true) {
			return nil, refusedClient
		}
		res = admittedReclaimed
	case len(t.conns) >= t.max:
		if !t.reclaimLocked(ip, false) {
			return nil, refusedTotal
		}
		res = admittedReclaimed
	}
	tc := &tcpConn{c: c, ip: ip, born: now}
	tc.last.Store(now.UnixNano())
	t.conns[tc] = struct{}{}
	t.perIP[ip]++
	return tc, res
}

// reclaimLocked closes the longest-idle connection without a query in
// progress (of ip only, when sameIP); false when there is none. A linear
// scan: it runs only at the bound, over at most max connections.
func (t *tcpTable) reclaimLocked(ip netip.Addr, sameIP bool) bool {
	for {
		var victim *tcpConn
		for tc := range t.conns {
			if (sameIP && tc.ip != ip) || tc.busy.Load() != 0 {
				continue
			}
			if victim == nil || tc.last.Load() < victim.last.Load() {
				victim = tc
			}
		}
		if victim == nil {
			return false
		}
		// It may have read a query since the scan; then look again.
		if !victim.busy.CompareAndSwap(0, -1) {
			continue
		}
		t.removeLocked(victim)
		_ = victim.c.Close() // its reader returns and calls remove
		return true
	}
}

// remove forgets tc; idempotent.
func (t *tcpTable) remove(tc *tcpConn) {
	t.mu.Lock()
	t.removeLocked(tc)
	t.mu.Unlock()
}

func (t *tcpTable) removeLocked(tc *tcpConn) {
	if _, ok := t.conns[tc]; !ok {
		return
	}
	delete(t.conns, tc)
	if t.perIP[tc.ip]--; t.perIP[tc.ip] <= 0 {
		delete(t.perIP, tc.ip)
	}
}

// len is the number of open connections.
func (t *tcpTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// stopReading ends the reads of every connection at once (Drain): each
// answers what it has read and closes.
func (t *tcpTable) stopReading() {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	for tc := range t.conns {
		_ = tc.c.SetReadDeadline(now)
	}
}
