package upstream

import (
	"net"
	"net/netip"
	"slices"
	"time"
)

// Transport is how a query went upstream.
type Transport uint8

// The transports of a Forwarded exchange.
const (
	TransportUDP Transport = iota + 1
	TransportTCP
	TransportDoT
)

// Forwarded records the upstream exchange that produced a reply, for a
// dnstap FORWARDER_QUERY / FORWARDER_RESPONSE pair. It is made only for a
// Probe that asked for it (Probe.Record) and never changes once Resolve
// returned it.
type Forwarded struct {
	Transport Transport
	// Local is the agent's end of the socket (zero over DNS over TLS,
	// whose pooled connections are not tracked per query), Upstream the
	// server's.
	Local, Upstream netip.AddrPort
	// Sent is when the query was written, Received when the accepted
	// reply was read.
	Sent, Received time.Time
	// Query and Reply are the messages as sent and as received (without
	// the TCP length prefix).
	Query, Reply []byte
}

// sent notes the query written on conn (nil over DNS over TLS); rec may
// be nil, when nobody asked for a record.
func (rec *Forwarded) sent(t Transport, conn net.Conn, up *upstream, query []byte) {
	if rec == nil {
		return
	}
	*rec = Forwarded{Transport: t, Upstream: up.ip, Sent: time.Now(), Query: slices.Clone(query)}
	if conn != nil {
		rec.Local, rec.Upstream = AddrPort(conn.LocalAddr()), AddrPort(conn.RemoteAddr())
	}
}

// received notes the accepted reply; rec may be nil.
func (rec *Forwarded) received(reply []byte) {
	if rec == nil {
		return
	}
	rec.Received, rec.Reply = time.Now(), slices.Clone(reply)
}

// AddrPort returns the address and port of a UDP or TCP address, zero for
// any other. The proxy's listeners use it too.
func AddrPort(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.UDPAddr:
		return a.AddrPort()
	case *net.TCPAddr:
		return a.AddrPort()
	}
	return netip.AddrPort{}
}
