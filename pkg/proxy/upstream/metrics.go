package upstream

import (
	"github.com/meshdns/meshdns/internal/metrics"
)

// Error kinds, the bounded values of the kind label.
const (
	kindTimeout   = "timeout"   // no acceptable reply within the try's timeout
	kindNetwork   = "network"   // dial, write or read failed (e.g. ICMP port unreachable)
	kindMismatch  = "mismatch"  // a reply whose ID or question is not ours (ignored)
	kindGarbage   = "garbage"   // a reply that does not parse (ignored)
	kindTruncated = "truncated" // TC=1 over UDP, retried over TCP
	kindRcode     = "rcode"     // SERVFAIL or REFUSED: try the next upstream
	kindFormerr   = "formerr"   // FORMERR without OPT: asked again without EDNS
	kindTLS       = "tls"       // a DNS-over-TLS handshake failed (certificate, protocol)
)

var errorKinds = []string{kindTimeout, kindNetwork, kindMismatch, kindGarbage, kindTruncated, kindRcode, kindFormerr, kindTLS}

// resolverMetrics are the resolver's collectors. Per-upstream children are resolved
// once in New so the query path never looks up a label.
type resolverMetrics struct {
	duration  *metrics.HistogramVec
	errors    *metrics.CounterVec
	inflight  *metrics.Gauge
	coalesced *metrics.Counter
	overload  *metrics.Counter
	hits      *metrics.Counter
	misses    *metrics.Counter
	evictions *metrics.Counter
	stale     *metrics.Counter
	entries   *metrics.GaugeFunc

	prefetches      *metrics.Counter
	prefetchSkipped *metrics.Counter
}

func newMetrics(entries func() float64) *resolverMetrics {
	return &resolverMetrics{
		duration: metrics.NewHistogramVec(metrics.HistogramOpts{
			Name: "meshdns_upstream_request_duration_seconds",
			Help: "Duration of one try against one upstream (UDP plus any TCP retry), successful or not.",
			// 250µs (loopback) to ~4s (past the default 2s timeout).
			Buckets: metrics.ExponentialBuckets(0.00025, 2, 15),
		}, []string{"upstream"}),
		errors: metrics.NewCounterVec(metrics.Opts{
			Name: "meshdns_upstream_errors_total",
			Help: "Upstream problems by kind: timeout, network, mismatch, garbage, truncated, rcode, formerr, tls.",
		}, []string{"upstream", "kind"}),
		inflight: metrics.NewGauge(metrics.Opts{
			Name: "meshdns_upstream_inflight_queries",
			Help: "Upstream queries in flight (after coalescing).",
		}),
		coalesced: metrics.NewCounter(metrics.Opts{
			Name: "meshdns_upstream_coalesced_total",
			Help: "Queries that joined an identical query already in flight instead of going upstream.",
		}),
		overload: metrics.NewCounter(metrics.Opts{
			Name: "meshdns_upstream_overloaded_total",
			Help: "Queries refused because the in-flight bound was reached.",
		}),
		hits: metrics.NewCounter(metrics.Opts{
			Name: "meshdns_cache_hits_total",
			Help: "Forwarded questions answered from a fresh cache entry.",
		}),
		misses: metrics.NewCounter(metrics.Opts{
			Name: "meshdns_cache_misses_total",
			Help: "Forwarded questions with no fresh cache entry.",
		}),
		evictions: metrics.NewCounter(metrics.Opts{
			Name: "meshdns_cache_evictions_total",
			Help: "Cache entries dropped to make room.",
		}),
		stale: metrics.NewCounter(metrics.Opts{
			Name: "meshdns_cache_stale_served_total",
			Help: "Replies served from an expired entry because every upstream failed (RFC 8767).",
		}),
		prefetches: metrics.NewCounter(metrics.Opts{
			Name: "meshdns_cache_prefetches_total",
			Help: "Refreshes of hot cached replies started before they expired (prefetch).",
		}),
		prefetchSkipped: metrics.NewCounter(metrics.Opts{
			Name: "meshdns_cache_prefetches_skipped_total",
			Help: "Hot cached replies not refreshed because MaxPrefetches refreshes were in flight.",
		}),
		entries: metrics.NewGaugeFunc(metrics.Opts{
			Name: "meshdns_cache_entries",
			Help: "Replies held in the cache.",
		}, entries),
	}
}

func (m *resolverMetrics) collectors() []metrics.Collector {
	return []metrics.Collector{m.duration, m.errors, m.inflight, m.coalesced, m.overload,
		m.hits, m.misses, m.evictions, m.stale, m.entries, m.prefetches, m.prefetchSkipped}
}

func (m *resolverMetrics) register(reg *metrics.Registry) error {
	if reg == nil {
		return nil
	}
	cs := m.collectors()
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			// Leave the registry as it was, so a retry can succeed.
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return err
		}
	}
	return nil
}
