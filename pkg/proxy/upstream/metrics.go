package upstream

import (
	"fmt"

	"github.com/meshdns/meshdns/pkg/metric"
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

// resolverMetrics are the resolver's series, counted with pkg/metric as
// the proxy's observer counts. Per-upstream children are resolved once,
// when an upstream is made, so the query path never looks up a label.
type resolverMetrics struct {
	duration  *metric.HistogramVec // by upstream
	errors    *metric.CounterVec   // by upstream, kind
	inflight  metric.Gauge
	coalesced metric.Counter
	overload  metric.Counter
	hits      metric.Counter
	misses    metric.Counter
	evictions metric.Counter
	stale     metric.Counter
	entries   func() float64 // the cache's size, read at each scrape

	prefetches      metric.Counter
	prefetchSkipped metric.Counter
}

var (
	durationLabels = []string{"upstream"}
	errorLabels    = []string{"upstream", "kind"}
	// 250µs (loopback) to ~4s (past the default 2s timeout).
	durationBuckets = metric.ExponentialBuckets(0.00025, 2, 15)
)

func newMetrics(entries func() float64) *resolverMetrics {
	return &resolverMetrics{
		duration: metric.NewHistogramVec(durationLabels, durationBuckets),
		errors:   metric.NewCounterVec(errorLabels),
		entries:  entries,
	}
}

// register puts every family on reg, or none if reg is nil.
func (m *resolverMetrics) register(reg metric.Registry) error {
	if reg == nil {
		return nil
	}
	counter := func(name, help string, c *metric.Counter) metric.Family {
		return metric.Family{Name: name, Help: help, Type: metric.CounterType, Collect: c.Collect}
	}
	fs := []metric.Family{{
		Name:    "meshdns_upstream_request_duration_seconds",
		Help:    "Duration of one try against one upstream (UDP plus any TCP retry), successful or not.",
		Type:    metric.HistogramType,
		Labels:  durationLabels,
		Buckets: durationBuckets,
		Collect: m.duration.Collect,
	}, {
		Name:    "meshdns_upstream_errors_total",
		Help:    "Upstream problems by kind: timeout, network, mismatch, garbage, truncated, rcode, formerr, tls.",
		Type:    metric.CounterType,
		Labels:  errorLabels,
		Collect: m.errors.Collect,
	}, {
		Name:    "meshdns_upstream_inflight_queries",
		Help:    "Upstream queries in flight (after coalescing).",
		Type:    metric.GaugeType,
		Collect: m.inflight.Collect,
	},
		counter("meshdns_upstream_coalesced_total", "Queries that joined an identical query already in flight instead of going upstream.", &m.coalesced),
		counter("meshdns_upstream_overloaded_total", "Queries refused because the in-flight bound was reached.", &m.overload),
		counter("meshdns_cache_hits_total", "Forwarded questions answered from a fresh cache entry.", &m.hits),
		counter("meshdns_cache_misses_total", "Forwarded questions with no fresh cache entry.", &m.misses),
		counter("meshdns_cache_evictions_total", "Cache entries dropped to make room.", &m.evictions),
		counter("meshdns_cache_stale_served_total", "Replies served from an expired entry because every upstream failed (RFC 8767).", &m.stale),
		{
			Name:    "meshdns_cache_entries",
			Help:    "Replies held in the cache.",
			Type:    metric.GaugeType,
			Collect: func(emit func(metric.Series)) { emit(metric.Series{Value: m.entries()}) },
		},
		counter("meshdns_cache_prefetches_total", "Refreshes of hot cached replies started before they expired (prefetch).", &m.prefetches),
		counter("meshdns_cache_prefetches_skipped_total", "Hot cached replies not refreshed because MaxPrefetches refreshes were in flight.", &m.prefetchSkipped),
	}
	for _, f := range fs {
		if err := reg.Register(f); err != nil {
			return fmt.Errorf("register %s: %w", f.Name, err)
		}
	}
	return nil
}
