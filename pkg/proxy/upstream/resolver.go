package upstream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshdns/meshdns/pkg/proxy/upstream/cache"
)

var (
	// ErrOverloaded means MaxConcurrent upstream queries are in flight; the
	// proxy answers REFUSED.
	ErrOverloaded = errors.New("too many upstream queries in flight")
	// ErrUpstreamFailed means every try failed and nothing stale was cached.
	ErrUpstreamFailed = errors.New("all upstreams failed")
	// ErrBadQuestion means qwire is not one uncompressed question section.
	ErrBadQuestion = errors.New("malformed question")
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
	metrics *metrics
	flights flights
	// perm orders the upstreams for one query; tests replace it to make
	// the order deterministic.
	perm     func(n int) []int
	inflight atomic.Int64
	clock    coarseClock // when cfg.Now is nil

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
		cfg:     cfg,
		log:     cfg.Logger,
		flights: flights{m: make(map[string]*call)},
		perm:    rand.Perm,
	}
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
	r.flights.joined = r.metrics.coalesced
	for _, addr := range cfg.Upstreams {
		up := &upstream{
			addr:     addr,
			duration: r.metrics.duration.WithLabelValues(addr),
			errs:     make(map[string]prometheus.Counter, len(errorKinds)),
		}
		for _, k := range errorKinds {
			up.errs[k] = r.metrics.errors.WithLabelValues(addr, k)
		}
		r.ups = append(r.ups, up)
	}
	if err := r.metrics.register(cfg.Registerer); err != nil {
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
func (r *Resolver) AppendReply(ctx context.Context, dst []byte, qwire []byte) (reply []byte, src Source, err error) {
	var kb [maxQuestion]byte
	nameLen, err := lowerQuestion(&kb, qwire)
	if err != nil {
		return dst, SourceUpstream, err
	}
	key := kb[:len(qwire)]
	out, hit, stale := r.fromCache(dst, qwire, key)
	if hit {
		return out, SourceCache, nil
	}
	// A done ctx asks for a hit or nothing (pkg/proxy tries hits on its
	// reader goroutine this way): fail before counting a miss or starting
	// an upstream query the caller will not wait for.
	if err := ctx.Err(); err != nil {
		return dst, SourceUpstream, err
	}
	r.metrics.misses.Inc()
	return r.miss(ctx, dst, qwire, string(key), nameLen, stale)
}

// AppendCached appends the reply AppendReply would give when the cache
// holds a fresh one, and reports whether it did. It never blocks, never asks
// an upstream and allocates nothing. A miss is not counted: the proxy probes
// here on its reader goroutine and then hands the question to AppendReply,
// which counts it once.
func (r *Resolver) AppendCached(dst, qwire []byte) ([]byte, Source, bool) {
	var kb [maxQuestion]byte
	if _, err := lowerQuestion(&kb, qwire); err != nil {
		return dst, SourceCache, false
	}
	out, hit, _ := r.fromCache(dst, qwire, kb[:len(qwire)])
	return out, SourceCache, hit
}

// fromCache appends a fresh cached reply for key to dst (hit true, hits
// counted), or returns dst with the expired entry still within the stale
// window, if any, for serve-stale.
func (r *Resolver) fromCache(dst, qwire, key []byte) (out []byte, hit bool, stale *cache.Entry) {
	if r.cache == nil {
		return dst, false, nil
	}
	e, ttl, st := r.cache.Get(key, r.now())
	switch {
	case st == cache.Fresh:
		r.metrics.hits.Inc()
		return e.AppendTo(dst, qwire, ttl), true, nil
	case st == cache.Stale && r.cfg.StaleWindow > 0:
		return dst, false, e
	}
	return dst, false, nil
}

// miss resolves a question the cache could not answer. It is a separate
// function so that the key array of AppendReply stays on the stack.
// stale, when not nil, is an expired entry to answer with if the upstreams
// are slower than StaleAnswerAfter (RFC 8767 section 5, the client response
// timer); the refresh goes on and lands in the cache.
func (r *Resolver) miss(ctx context.Context, dst, qwire []byte, key string, nameLen int, stale *cache.Entry) ([]byte, Source, error) {
	var giveUp <-chan time.Time
	if stale != nil && r.cfg.StaleAnswerAfter > 0 {
		t := time.NewTimer(r.cfg.StaleAnswerAfter)
		defer t.Stop()
		giveUp = t.C
	}
	res, _ := r.flights.do(ctx, &r.wg, key, giveUp, func() answer { return r.resolve([]byte(key), nameLen) })
	if errors.Is(res.err, errSlow) {
		r.metrics.stale.Inc()
		return stale.AppendTo(dst, qwire, uint32(r.cfg.StaleTTL/time.Second)), SourceCache, nil
	}
	if res.err != nil {
		return dst, res.src, res.err
	}
	return res.e.AppendTo(dst, qwire, res.ttl), res.src, nil
}

// resolve is the work of one flight: ask upstream within the concurrency
// bound, cache what may be cached, fall back to a stale entry.
func (r *Resolver) resolve(q []byte, nameLen int) answer {
	start := time.Now()
	var (
		rep *reply
		err error
	)
	if r.inflight.Add(1) > int64(r.cfg.MaxConcurrent) {
		r.metrics.overload.Inc()
		err = ErrOverloaded
	} else {
		r.metrics.inflight.Inc()
		rep, err = r.forward(r.ctx, q, nameLen)
		r.metrics.inflight.Dec()
	}
	r.inflight.Add(-1)

	if err == nil {
		if rep.cacheable && r.cache != nil && r.cache.Set(string(q), rep.e) {
			r.metrics.evictions.Inc()
		}
		r.debug("upstream answered", q, "rcode", dns.RcodeToString[rep.rcode], "duration", time.Since(start))
		return answer{e: rep.e, ttl: rep.e.TTL, src: SourceUpstream}
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
		r.cancel()
		r.wg.Wait()
	})
	return nil
}

// debug logs one per-query line, with the question's qname and qtype, when
// Debug is on.
func (r *Resolver) debug(msg string, q []byte, args ...any) {
	if !r.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	name, off, err := dns.UnpackDomainName(q, 0)
	qtype := "?"
	if err == nil && off+2 <= len(q) {
		qtype = dns.Type(uint16(q[off])<<8 | uint16(q[off+1])).String()
	}
	r.log.Debug(msg, append([]any{"qname", name, "qtype", qtype}, args...)...)
}
