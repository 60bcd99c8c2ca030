package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/proxy/upstream/cache"
)

var (
	// ErrOverloaded means MaxConcurrent upstream queries are in flight; the
	// proxy answers REFUSED.
	ErrOverloaded = errors.New("too many upstream queries in flight")
	// ErrUpstreamFailed means every try failed and nothing stale was cached.
	ErrUpstreamFailed = errors.New("all upstreams failed")
	// ErrBadQuestion means qwire is not one uncompressed question section.
	ErrBadQuestion = dnswire.ErrBadQuestion
	// ErrClosed means the Resolver was closed.
	ErrClosed = errors.New("resolver closed")
	// errSlow: the upstreams took longer than StaleAnswerAfter; internal,
	// turned into a stale answer.
	errSlow = errors.New("upstream slower than the stale answer timer")
)

// Resolver forwards questions upstream and caches the replies. It is safe
// for concurrent use.
type Resolver struct {
	cfg     Config
	log     *slog.Logger
	ups     []*upstream
	cache   *cache.Cache // or nil when CacheSize < 0
	metrics *resolverMetrics
	flights flights
	// perm orders the upstreams for one query; tests replace it to make
	// the order deterministic.
	perm     func(n int) []int
	inflight atomic.Int64
	// prefetching counts the prefetches in flight (MaxPrefetches).
	prefetching atomic.Int64
	clock       coarseClock // when cfg.Now is nil
	closer      closer      // closes the sockets of finished UDP tries
	// resolveFlight is r.resolveAsk, made once in New: a closure per
	// miss was one allocation.
	resolveFlight func(context.Context, flightAsk) answer

	// routes sends some domains to other upstreams (SetRoutes); never nil.
	routes   atomic.Pointer[routeTable]
	routesMu sync.Mutex           // serialises SetRoutes; guards routeUps
	routeUps map[string]*upstream // the routes' upstreams not in ups, by address

	ctx       context.Context // ends at Close; parent of every upstream query
	cancel    context.CancelFunc
	wg        sync.WaitGroup // the flights' goroutines
	closeOnce sync.Once
}

// New validates cfg and returns a Resolver. It does no I/O.
func New(cfg Config) (*Resolver, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("upstream config: %w", err)
	}
	r := &Resolver{
		cfg:      cfg,
		log:      cfg.Logger,
		flights:  flights{m: make(map[string]*call)},
		perm:     rand.Perm,
		routeUps: make(map[string]*upstream),
	}
	r.resolveFlight = r.resolveAsk
	r.routes.Store(&routeTable{})
	if cfg.CacheSize > 0 {
		stale := max(cfg.StaleWindow, -1)
		r.cache = cache.New(cfg.CacheSize, stale)
	}
	r.metrics = newMetrics(func() float64 {
		if r.cache == nil {
			return 0
		}
		return float64(r.cache.Len())
	})
	r.flights.joined = &r.metrics.coalesced
	for _, s := range cfg.Upstreams {
		a, _ := ParseAddr(s) // checked by withDefaults
		r.ups = append(r.ups, r.newUpstream(a))
	}
	if err := r.metrics.register(cfg.Registry); err != nil {
		return nil, fmt.Errorf("register upstream metrics: %w", err)
	}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	return r, nil
}

// AppendReply appends to dst a complete DNS reply for the question whose
// wire bytes are qwire (uncompressed name labels, type, class; any case).
// The reply has ID 0, the question exactly as qwire, RD and RA set, the
// upstream's rcode and no OPT record. A cache hit allocates nothing and is
// answered whatever the state of ctx; with a done ctx anything else fails at
// once with ctx.Err() and nothing is sent upstream. On error dst is returned
// unchanged: ErrOverloaded means answer REFUSED, anything else SERVFAIL.
//
// AppendReply is AppendCached then Resolve; a caller that has already
// parsed and lowercased the question calls those two itself.
func (r *Resolver) AppendReply(ctx context.Context, dst []byte, qwire []byte) (reply []byte, src Source, err error) {
	var kb [maxQuestion]byte
	if _, err := lowerQuestion(&kb, qwire); err != nil {
		return dst, SourceUpstream, err
	}
	key := kb[:len(qwire)]
	var p Probe
	if out, src, hit := r.AppendCached(dst, qwire, key, &p); hit {
		return out, src, nil
	}
	if err := ctx.Err(); err != nil {
		return dst, SourceUpstream, err
	}
	return r.Resolve(ctx, dst, qwire, key, &p)
}

// Probe is what AppendCached learned about a question it could not answer,
// handed on to Resolve so the miss path does not look it up again.
type Probe struct {
	// stale is an expired entry still within the stale window, or nil.
	stale *cache.Entry
	// from is the upstream that answered Resolve, or "".
	from string
	// record asks Resolve for fwd: the upstream exchange it started.
	record bool
	fwd    *Forwarded
}

// Record asks the Resolve given p to note the upstream exchange it starts
// (Forwarded), for a dnstap output. Call it after AppendCached, which
// clears p. Recording copies the messages; without it Resolve pays
// nothing.
func (p *Probe) Record() { p.record = true }

// Forwarded returns the upstream exchange whose reply the Resolve given p
// returned, when p asked for it (Record) and this Resolve sent the query:
// nil for an answer from the cache or a stale entry, a failure, or a
// query that joined another caller's exchange (that caller reports it).
func (p *Probe) Forwarded() *Forwarded { return p.fwd }

// Upstream returns the address of the upstream whose reply the Resolve
// given p returned: "" when the reply came from the cache (a coalesced
// query names the upstream that answered the flight) or Resolve failed.
func (p *Probe) Upstream() string { return p.from }

// AppendCached appends the fresh cached reply for a question to dst and
// reports true, or reports false and notes in p what Resolve needs. qwire
// is the question as the client sent it and key the same bytes lowercased
// (dnswire.LowerQuestion): the proxy has both from its one parse. It never
// blocks, never asks an upstream, allocates nothing, and does not count a
// miss (Resolve does).
func (r *Resolver) AppendCached(dst, qwire, key []byte, p *Probe) ([]byte, Source, bool) {
	*p = Probe{}
	if r.cache == nil || len(key) != len(qwire) {
		return dst, SourceCache, false
	}
	now := r.now()
	e, ttl, st := r.cache.Get(key, now)
	switch {
	case st == cache.Fresh:
		r.metrics.hits.Inc()
		if r.cfg.Prefetch > 0 {
			r.maybePrefetch(e, ttl, key, now)
		}
		return e.AppendTo(dst, qwire, ttl), SourceCache, true
	case st == cache.Stale && r.cfg.StaleWindow > 0:
		p.stale = e
	}
	return dst, SourceCache, false
}

// Resolve answers a question AppendCached missed: it joins the upstream
// query in flight for it or starts one, and blocks until the answer, ctx's
// end, or (with a stale entry in p) StaleAnswerAfter. qwire, key and p are
// as AppendCached took and left them.
func (r *Resolver) Resolve(ctx context.Context, dst, qwire, key []byte, p *Probe) ([]byte, Source, error) {
	if len(qwire) < 5 || len(key) != len(qwire) {
		return dst, SourceUpstream, ErrBadQuestion
	}
	r.metrics.misses.Inc()
	return r.miss(ctx, dst, qwire, string(key), len(qwire)-4, p)
}

// miss resolves a question the cache could not answer. It is a separate
// function so that the key array of AppendReply stays on the stack.
// p.stale, when not nil, is an expired entry to answer with if the upstreams
// are slower than StaleAnswerAfter (RFC 8767 section 5, the client response
// timer); the refresh goes on and lands in the cache. p notes the
// upstream that answered.
func (r *Resolver) miss(ctx context.Context, dst, qwire []byte, key string, nameLen int, p *Probe) ([]byte, Source, error) {
	stale := p.stale
	var giveUp <-chan time.Time
	if stale != nil && r.cfg.StaleAnswerAfter > 0 {
		t := time.NewTimer(r.cfg.StaleAnswerAfter)
		defer t.Stop()
		giveUp = t.C
	}
	res, shared := r.flights.do(ctx, r.ctx, &r.wg, flightAsk{key, nameLen, p.record}, r.cfg.window, giveUp, r.resolveFlight)
	if errors.Is(res.err, errSlow) {
		r.metrics.stale.Inc()
		return stale.AppendTo(dst, qwire, uint32(r.cfg.StaleTTL/time.Second)), SourceCache, nil
	}
	if res.err != nil {
		return dst, res.src, res.err
	}
	p.from = res.from
	if !shared {
		p.fwd = res.fwd
	}
	return res.e.AppendTo(dst, qwire, res.ttl), res.src, nil
}

// resolveAsk is the work of the flight for a.
func (r *Resolver) resolveAsk(ctx context.Context, a flightAsk) answer {
	return r.resolve(ctx, []byte(a.key), a.nameLen, a.record)
}

// resolve is the work of one flight: ask upstream within the concurrency
// bound, cache what may be cached, fall back to a stale entry. With record
// the answer carries the upstream exchange.
func (r *Resolver) resolve(ctx context.Context, q []byte, nameLen int, record bool) answer {
	start := time.Now()
	gen := r.routes.Load().gen
	var (
		rep reply
		err error
	)
	if r.inflight.Add(1) > int64(r.cfg.MaxConcurrent) {
		r.metrics.overload.Inc()
		err = ErrOverloaded
	} else {
		r.metrics.inflight.Inc()
		rep, err = r.forward(ctx, q, nameLen, record)
		r.metrics.inflight.Dec()
	}
	r.inflight.Add(-1)

	if err == nil {
		// Under routes set meanwhile the name may belong to other
		// upstreams now: answer, but do not keep.
		keep := rep.cacheable && r.cache != nil && r.routes.Load().gen == gen
		if keep && r.cache.Set(string(q), rep.e) {
			r.metrics.evictions.Inc()
		}
		if r.debugging() { // the arguments would escape: an allocation per answer
			r.debug("upstream answered", q, "rcode", dns.RcodeToString[rep.rcode], "duration", time.Since(start))
		}
		return answer{e: rep.e, ttl: rep.e.TTL, src: SourceUpstream, from: rep.from, fwd: rep.fwd}
	}
	// RFC 8767 section 4: when resolution fails (or cannot start: the
	// in-flight bound), an expired answer within the stale window beats
	// SERVFAIL and REFUSED.
	if r.cache != nil && r.cfg.StaleWindow > 0 && !errors.Is(err, context.Canceled) {
		switch e, ttl, st := r.cache.Get(q, r.now()); st {
		case cache.Fresh: // another flight refreshed it meanwhile
			return answer{e: e, ttl: ttl, src: SourceCache}
		case cache.Stale:
			r.metrics.stale.Inc()
			r.debug("served stale", q, "err", err)
			return answer{e: e, ttl: uint32(r.cfg.StaleTTL / time.Second), src: SourceCache}
		}
	}
	if errors.Is(err, context.Canceled) && r.ctx.Err() != nil {
		err = ErrClosed
	}
	r.debug("upstream failed", q, "err", err, "duration", time.Since(start))
	return answer{src: SourceUpstream, err: err}
}

// Exchange resolves q through the cache and the upstreams. It is the slow
// path (ExternalName chasing, /debug/lookup) and allocates freely.
func (r *Resolver) Exchange(ctx context.Context, q dns.Question) (*dns.Msg, Source, error) {
	qwire, err := questionWire(q)
	if err != nil {
		return nil, SourceUpstream, fmt.Errorf("%w: %w", ErrBadQuestion, err)
	}
	b, src, err := r.AppendReply(ctx, nil, qwire)
	if err != nil {
		return nil, src, err
	}
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		return nil, src, fmt.Errorf("unpack cached reply: %w", err)
	}
	return m, src, nil
}

// Peek returns the fresh cached reply for q, with TTLs counted down, without
// asking upstream. It reports false when nothing fresh is cached.
func (r *Resolver) Peek(q dns.Question) (*dns.Msg, bool) {
	if r.cache == nil {
		return nil, false
	}
	qwire, err := questionWire(q)
	if err != nil {
		return nil, false
	}
	var kb [maxQuestion]byte
	if _, err := lowerQuestion(&kb, qwire); err != nil {
		return nil, false
	}
	e, ttl, st := r.cache.Get(kb[:len(qwire)], r.now())
	if st != cache.Fresh {
		return nil, false
	}
	m := new(dns.Msg)
	if err := m.Unpack(e.AppendTo(nil, qwire, ttl)); err != nil {
		return nil, false
	}
	return m, true
}

// now reads the cache clock in unix nanoseconds.
func (r *Resolver) now() int64 {
	if r.cfg.Now != nil {
		return r.cfg.Now().UnixNano()
	}
	return r.clock.now(r.ctx, &r.wg)
}

// Close cancels the queries in flight and waits for them. It is idempotent.
// Cache hits keep working after Close; misses fail with ErrClosed.
func (r *Resolver) Close() error {
	r.closeOnce.Do(func() {
		r.flights.close()
		r.clock.stop()
		r.closer.stop()
		r.cancel()
		r.wg.Wait()
		r.closer.flush()
		r.routesMu.Lock()
		ups := slices.Concat(r.ups, slices.Collect(maps.Values(r.routeUps)))
		r.routesMu.Unlock()
		for _, up := range ups {
			if up.dot != nil {
				up.dot.close()
			}
		}
	})
	return nil
}

// debugging reports whether per-query lines are logged (Debug is on).
func (r *Resolver) debugging() bool { return r.log.Enabled(context.Background(), slog.LevelDebug) }

// debug logs one per-query line, with the question's qname and qtype, when
// Debug is on.
func (r *Resolver) debug(msg string, q []byte, args ...any) {
	if !r.debugging() {
		return
	}
	name, off, err := dns.UnpackDomainName(q, 0)
	qtype := "?"
	if err == nil && off+2 <= len(q) {
		qtype = dns.Type(uint16(q[off])<<8 | uint16(q[off+1])).String()
	}
	r.log.Debug(msg, append([]any{"qname", name, "qtype", qtype}, args...)...)
}
