package observe

import (
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
	// zero when the answer came through the proxy's Handler.Serve.
	Client, Server netip.AddrPort
	// Received is when the query was read, Answered when its reply was
	// ready.
	Received, Answered time.Time
	// Forwarded is the upstream exchange that produced Reply, when this
	// query sent one (not for a table or cache answer, nor for a query
	// that joined another client's exchange in flight), else nil.
	Forwarded *upstream.Forwarded
}

// tap hands the answer to the Tap; its times come from the observer's
// monotonic clock, anchored at its epoch.
func (l *queryLogger) tap(o *Observer, oc *Outcome, elapsed time.Duration) {
	received := o.epoch.Add(oc.Timing.Start - 1)
	a := TapAnswer{Query: oc.Query.Pkt, Reply: oc.Reply, Protocol: oc.Protocol,
		Received: received, Answered: received.Add(elapsed)}
	if oc.Addrs != nil {
		a.Client, a.Server = oc.Addrs.Client, oc.Addrs.Server
	}
	if oc.Probe != nil {
		a.Forwarded = oc.Probe.Forwarded()
	}
	l.out.TapAnswer(&a)
}
