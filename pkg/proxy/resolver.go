package proxy

import (
	"context"
	"errors"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/nametable"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// Resolver answers the questions the table does not own (upstream servers
// and their cache). pkg/proxy/upstream implements it; tests use fakes.
type Resolver interface {
	// AppendReply appends to dst a complete DNS reply in wire format for the
	// question whose raw wire bytes are qwire (the question section exactly
	// as the client sent it: uncompressed name, type, class; any case).
	// The reply has ID 0, the question written exactly as qwire, RD and RA
	// set, the upstream rcode and no OPT record (the proxy owns the client
	// side of EDNS). Cache hits allocate nothing. An error means no answer:
	// upstream.ErrOverloaded makes the proxy answer REFUSED, anything else
	// SERVFAIL. With a ctx that is already done it must not block: it
	// answers from its cache or fails with an error (it may go on
	// resolving in the background); UDP readers use that to serve cache
	// hits without handing the query to a worker goroutine.
	AppendReply(ctx context.Context, dst []byte, qwire []byte) (reply []byte, src upstream.Source, err error)
	// Exchange resolves q on the slow path (allocations are fine): the
	// proxy chases ExternalName targets with it.
	Exchange(ctx context.Context, q dns.Question) (*dns.Msg, upstream.Source, error)
}

// CacheAppender is an optional Resolver fast path: AppendCached appends the
// reply AppendReply would give when the Resolver's cache holds a fresh one,
// and reports false otherwise. It never blocks, never asks an upstream and
// allocates nothing. Without it the proxy probes AppendReply with an
// expired context, which counts a miss twice in the Resolver's metrics.
type CacheAppender interface {
	AppendCached(dst []byte, qwire []byte) (reply []byte, src upstream.Source, ok bool)
}

// Lookuper is the part of *nametable.Table the server uses; tests may
// substitute a fake.
type Lookuper interface {
	Lookup(q dns.Question) nametable.Result
}

func isOverloaded(err error) bool { return errors.Is(err, upstream.ErrOverloaded) }

func resolverSource(s upstream.Source) source {
	if s == upstream.SourceCache {
		return srcCache
	}
	return srcUpstream
}

var _ Lookuper = (*nametable.Table)(nil)

// The real upstream Resolver has the cache-only fast path; losing it would
// silently double-count misses (see CacheAppender).
var (
	_ Resolver      = (*upstream.Resolver)(nil)
	_ CacheAppender = (*upstream.Resolver)(nil)
)
