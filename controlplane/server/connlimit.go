package server

import (
	"errors"
	"net"
	"net/netip"
	"sync"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
)

// limitListener closes, as soon as they are accepted, connections beyond
// max in all or beyond perPeer from one IP address: each costs buffers
// and a reader goroutine before it has said anything, so one client must
// not be able to hold them all.
type limitListener struct {
	net.Listener
	max, perPeer int
	refused      *prometheus.CounterVec // by reason (total|peer)

	mu    sync.Mutex // guards following
	total int
	peers map[netip.Addr]int
}

func newLimitListener(l net.Listener, max, perPeer int, refused *prometheus.CounterVec) *limitListener {
	return &limitListener{Listener: l, max: max, perPeer: perPeer, refused: refused, peers: map[netip.Addr]int{}}
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		addr := netip.Addr{}
		if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
			addr = ap.Addr().Unmap()
		}
		if reason := l.take(addr); reason != "" {
			l.refused.WithLabelValues(reason).Inc()
			c.Close()
			continue
		}
		return &limitConn{Conn: c, release: func() { l.give(addr) }}, nil
	}
}

// take counts a connection from addr, or says why it is refused.
func (l *limitListener) take(addr netip.Addr) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.total >= l.max:
		return "total"
	case addr.IsValid() && l.peers[addr] >= l.perPeer:
		return "peer"
	}
	l.total++
	if addr.IsValid() {
		l.peers[addr]++
	}
	return ""
}

func (l *limitListener) give(addr netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.total--
	if !addr.IsValid() {
		return
	}
	if l.peers[addr]--; l.peers[addr] <= 0 {
		delete(l.peers, addr)
	}
}

type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

// SyscallConn is the TCP connection's: agentstream writes to it without
// blocking.
func (c *limitConn) SyscallConn() (syscall.RawConn, error) {
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return nil, errors.ErrUnsupported
	}
	return sc.SyscallConn()
}

func (c *limitConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}
