package proxy

import (
	"net/netip"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/nametable"
	"github.com/meshdns/meshdns/pkg/proxy/observe"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// request is one client query, parsed once by the goroutine that read it
// and carried, by value, to whichever goroutine answers it: the UDP reader
// or TCP connection for table answers and cache hits, a forwarding worker
// for the rest. Nothing is parsed or looked up twice on the way.
type request struct {
	// Query is the query as parsed; its packet and question refer to the
	// reader's buffer until moved gives it its own copy.
	dnswire.Query
	proto Protocol
	// timing is when answer started the clock (observe.Timing).
	timing observe.Timing
	// truncated: finish cut the reply to the client's size.
	truncated bool
	// tick counts the answers of this request value, whoever reuses it,
	// to time one in observe.TimeEvery without a shared counter.
	tick uint32

	// What the reader learned before handing over: the ExternalName to
	// chase, or (chase nil) the Resolver's note on its cache miss.
	chase *nametable.Result
	probe upstream.Probe
	// src is where the reply came from, noted when it is counted.
	src observe.Source
	// upErr is the Resolver's error when the reply is made up for lack of
	// an answer.
	upErr error
	// pol is the policy of the table answer loaded, or nil; verdict what
	// it said (policy.go).
	pol     *Policy
	verdict observe.Verdict
	// zoneAllowed and ownsCluster are those of the state loaded.
	zoneAllowed, ownsCluster bool
	// client is the address that sent the query and server the one that
	// received it (the query log's dnstap frames carry both); zero
	// through Handler.Serve.
	client, server netip.AddrPort
	// upstream is the address of the upstream that answered, when the
	// Resolver says (upstream.Probe.Upstream), else "".
	upstream string
}

// moved returns a copy of r whose packet lives in buf (reused when big
// enough), for a goroutine that outlives the reader's buffer.
func (r *request) moved(buf []byte) request {
	c := *r
	c.Pkt = append(buf[:0], r.Pkt...)
	return c
}
