package upstream

import (
	"github.com/prometheus/client_golang/prometheus"
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
)

var errorKinds = []string{kindTimeout, kindNetwork, kindMismatch, kindGarbage, kindTruncated, kindRcode, kindFormerr}

// metrics are the resolver's collectors. Per-upstream children are resolved
// once in New so the query path never looks up a label.
type metrics struct {
	duration  *prometheus.HistogramVec
	errors    *prometheus.CounterVec
	inflight  prometheus.Gauge
	coalesced prometheus.Counter
	overload  prometheus.Counter
	hits      prometheus.Counter
	misses    prometheus.Counter
	evictions prometheus.Counter
	stale     prometheus.Counter
	entries   prometheus.GaugeFunc
}

func newMetrics(entries func() float64) *metrics {
	return &metrics{
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "meshdns", Subsystem: "upstream", Name: "request_duration_seconds",
			Help: "Duration of one try against one upstream (UDP plus any TCP retry), successful or not.",
			// 250µs (loopback) to ~4s (past the default 2s timeout).
			Buckets: prometheus.ExponentialBuckets(0.00025, 2, 15),
		}, []string{"upstream"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "meshdns", Subsystem: "upstream", Name: "errors_total",
			Help: "Upstream problems by kind: timeout, network, mismatch, garbage, truncated, rcode, formerr.",
		}, []string{"upstream", "kind"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "meshdns", Subsystem: "upstream", Name: "inflight_queries",
			Help: "Upstream queries in flight (after coalescing).",
		}),
		coalesced: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "meshdns", Subsystem: "upstream", Name: "coalesced_total",
			Help: "Queries that joined an identical query already in flight instead of going upstream.",
		}),
		overload: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "meshdns", Subsystem: "upstream", Name: "overloaded_total",
			Help: "Queries refused because the in-flight bound was reached.",
		}),
		hits: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "meshdns", Subsystem: "cache", Name: "hits_total",
			Help: "Forwarded questions answered from a fresh cache entry.",
		}),
		misses: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "meshdns", Subsystem: "cache", Name: "misses_total",
			Help: "Forwarded questions with no fresh cache entry.",
		}),
		evictions: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "meshdns", Subsystem: "cache", Name: "evictions_total",
			Help: "Cache entries dropped to make room.",
		}),
		stale: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "meshdns", Subsystem: "cache", Name: "stale_served_total",
			Help: "Replies served from an expired entry because every upstream failed (RFC 8767).",
		}),
		entries: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "meshdns", Subsystem: "cache", Name: "entries",
			Help: "Replies held in the cache.",
		}, entries),
	}
}

func (m *metrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.duration, m.errors, m.inflight, m.coalesced, m.overload,
		m.hits, m.misses, m.evictions, m.stale, m.entries}
}

func (m *metrics) register(reg prometheus.Registerer) error {
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
