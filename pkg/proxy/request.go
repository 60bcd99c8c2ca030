package proxy

import (
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/proxy/observe"
)

// request is one client query as the parse stage (parse.go) leaves it:
// the header, question and OPT fields, the protocol and the addresses.
// Nothing after the parse writes it or reads the packet again.
type request struct {
	// Query refers to the reader's buffer until query.moved gives it its
	// own copy.
	dnswire.Query
	proto Protocol
	// addrs are the address that sent the query and the one that received
	// it (the query log's dnstap frames carry both); zero through
	// Handler.Serve.
	addrs observe.Addrs
}

// query is one query in flight, carried by value to whichever goroutine
// answers it: the UDP reader or TCP connection for table answers and
// cache hits, a forwarding worker for the rest. Nothing is parsed or
// looked up twice on the way.
type query struct {
	req request
	// dec is what the decide stage made of req (decision.go); answer
	// starts each query with a zero one.
	dec decision
	// tick counts the answers of this value, whoever reuses it, to time
	// one in observe.TimeEvery without a shared counter.
	tick uint32
}

// moved returns a copy of q whose packet lives in buf (reused when big
// enough), for a goroutine that outlives the reader's buffer.
func (q *query) moved(buf []byte) query {
	c := *q
	c.req.Pkt = append(buf[:0], q.req.Pkt...)
	return c
}

// wireName converts a wire-form name to presentation form (allocates).
func wireName(name []byte) string {
	s, _, err := dns.UnpackDomainName(name, 0)
	if err != nil {
		return "<bad name>"
	}
	return s
}
