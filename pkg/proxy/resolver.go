package proxy

import (
	"context"
	"errors"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/nametable"
	"github.com/meshdns/meshdns/pkg/proxy/observe"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// Resolver answers the questions the table does not own (upstream servers
// and their cache). pkg/proxy/upstream implements it; tests use fakes.
type Resolver interface {
	// AppendCached appends to dst the reply for a question when the
	// Resolver's cache holds a fresh one and reports true; else it reports
	// false and leaves in p what Resolve needs. qwire is the question
	// section exactly as the client sent it (uncompressed name, type,
	// class; any case) and key the same bytes lowercased. The reply has
	// ID 0, the question written exactly as qwire, RD and RA set, the
	// upstream rcode and no OPT record (the proxy owns the client side of
	// EDNS). It never blocks and allocates nothing: UDP readers call it.
	AppendCached(dst, qwire, key []byte, p *upstream.Probe) (reply []byte, src upstream.Source, ok bool)
	// Resolve appends the reply for a question AppendCached missed, with
	// the same arguments; it may block until ctx ends. An error means no
	// answer: upstream.ErrOverloaded makes the proxy answer REFUSED,
	// anything else SERVFAIL.
	Resolve(ctx context.Context, dst, qwire, key []byte, p *upstream.Probe) (reply []byte, src upstream.Source, err error)
	// Exchange resolves q on the slow path (allocations are fine): the
	// proxy chases ExternalName targets with it.
	Exchange(ctx context.Context, q dns.Question) (*dns.Msg, upstream.Source, error)
}

// Lookuper is the part of *nametable.Table the server uses; tests may
// substitute a fake.
type Lookuper interface {
	Lookup(q dns.Question) nametable.Result
}

func isOverloaded(err error) bool { return errors.Is(err, upstream.ErrOverloaded) }

func resolverSource(s upstream.Source) observe.Source {
	if s == upstream.SourceCache {
		return observe.SourceCache
	}
	return observe.SourceUpstream
}

var _ Lookuper = (*nametable.Table)(nil)

var _ Resolver = (*upstream.Resolver)(nil)
