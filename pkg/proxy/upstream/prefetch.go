package upstream

import (
	"context"

	"github.com/meshdns/meshdns/pkg/proxy/upstream/cache"
)

// Prefetch (CoreDNS cache's prefetch): every fresh hit counts on its entry;
// the hit that finds the entry hot (Config.Prefetch hits in a row) with
// little TTL left starts one refresh in the background, bounded by
// MaxPrefetches. The refresh is an ordinary flight: misses of the same
// question meanwhile join it, its reply replaces the entry in the cache
// and inherits the hit count, so a name asked often never expires.

// maybePrefetch is called on a fresh hit of e with ttl seconds left, for
// the lowercased question key. It allocates only when it starts a
// refresh.
func (r *Resolver) maybePrefetch(e *cache.Entry, ttl uint32, key []byte, now int64) {
	hits := e.Hit(now, r.cfg.PrefetchWindow)
	if hits < uint32(r.cfg.Prefetch) {
		return
	}
	// ceil(TTL x percent / 100), as CoreDNS: a 30s TTL at 10% is refreshed
	// with 3s left, a 5s one with 1s.
	threshold := (uint64(e.TTL)*uint64(r.cfg.PrefetchPercent) + 99) / 100
	if uint64(ttl) > threshold || !e.ClaimRefresh() {
		return
	}
	if r.prefetching.Add(1) > int64(r.cfg.MaxPrefetches) {
		r.prefetching.Add(-1)
		e.ReleaseRefresh()
		r.metrics.prefetchSkipped.Inc()
		return
	}
	k := string(key)
	started := r.flights.start(r.ctx, &r.wg, k, func(ctx context.Context) answer {
		defer r.prefetching.Add(-1)
		a := r.resolve(ctx, []byte(k), len(k)-4, false)
		if a.err == nil && a.e != e {
			a.e.InheritHeat(e)
		}
		return a
	})
	if !started {
		// A miss of the same question is being resolved already (or the
		// Resolver closed): nothing to add.
		r.prefetching.Add(-1)
		e.ReleaseRefresh()
		return
	}
	r.metrics.prefetches.Inc()
}
