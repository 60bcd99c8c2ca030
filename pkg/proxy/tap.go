package proxy

import (
	"net"
	"net/netip"
	"time"

	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// Tap receives the answers the query log writes, after its classes,
// sampling and rate cap: a second output beside (or instead of) the JSON
// lines, such as the agent's dnstap writer. It is called on the answer
// path, so it must not block; a slow output drops.
type Tap interface {
	TapAnswer(a *TapAnswer)
}

// TapAnswer is one answer handed to a Tap. It and its slices are valid
// only during the call: copy what is kept.
type TapAnswer struct {
	// Query and Reply are the messages in wire form, as received and as
	// sent.
	Query, Reply []byte
	Protocol     Protocol
	// Client sent the query, Server received it (the proxy's socket);
	// zero when the answer came through Handler.Serve.
	Client, Server netip.AddrPort
	// Received is when the query was read, Answered when its reply was
	// ready.
	Received, Answered time.Time
	// Forwarded is the upstream exchange that produced Reply, when this
	// query sent one (not for a table or cache answer, nor for a query
	// that joined another client's exchange in flight), else nil.
	Forwarded *upstream.Forwarded
}

// recordForwards asks the Resolve about r's cache miss to note its
// upstream exchange when a Tap may write it: the sampling is decided only
// once the answer is known, so every miss is noted while a Tap is set.
func (h *Handler) recordForwards(r *request) {
	if ql := h.qlog.Load(); ql != nil && ql.out != nil {
		r.probe.Record()
	}
}

// tap hands the answer to the Tap; its times come from the handler's
// monotonic clock, anchored at its epoch.
func (l *queryLogger) tap(h *Handler, r *request, out []byte, elapsed time.Duration) {
	received := h.epoch.Add(r.start - 1)
	a := TapAnswer{Query: r.Pkt, Reply: out, Protocol: r.proto, Client: r.client, Server: r.server,
		Received: received, Answered: received.Add(elapsed), Forwarded: r.probe.Forwarded()}
	l.out.TapAnswer(&a)
}

// addrPort returns the address and port of a UDP or TCP address, zero for
// any other.
func addrPort(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.UDPAddr:
		return a.AddrPort()
	case *net.TCPAddr:
		return a.AddrPort()
	}
	return netip.AddrPort{}
}
