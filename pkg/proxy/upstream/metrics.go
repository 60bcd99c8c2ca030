package upstream

import (
	"fmt"

	"github.com/meshdns/meshdns/internal/metrics"
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

// Label names and buckets of the labelled families, which their
// pkg/metric Family declares too.
var (
	durationLabels = []string{"upstream"}
	errorLabels    = []string{"upstream", "kind"}
	// 250µs (loopback) to ~4s (past the default 2s timeout).
	durationBuckets = metrics.ExponentialBuckets(0.00025, 2, 15)
)

func newMetrics(entries func() float64) *resolverMetrics {
	return &resolverMetrics{
		duration: metrics.NewHistogramVec(metrics.HistogramOpts{
			Name:    "meshdns_upstream_request_duration_seconds",
			Help:    "Duration of one try against one upstream (UDP plus any TCP retry), successful or not.",
			Buckets: durationBuckets,
		}, durationLabels),
		errors: metrics.NewCounterVec(metrics.Opts{
			Name: "meshdns_upstream_errors_total",
			Help: "Upstream problems by kind: timeout, network, mismatch, garbage, truncated, rcode, formerr, tls.",
		}, errorLabels),
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

// register puts every family on reg, or none if reg is nil. The
// Resolver counts with internal/metrics collectors (atomics, children
// resolved in New); reg sees them through the public pkg/metric contract.
func (m *resolverMetrics) register(reg metric.Registry) error {
	if reg == nil {
		return nil
	}
	fs := []metric.Family{
		family(m.duration, durationLabels, durationBuckets), family(m.errors, errorLabels, nil),
		family(m.inflight, nil, nil), family(m.coalesced, nil, nil), family(m.overload, nil, nil),
		family(m.hits, nil, nil), family(m.misses, nil, nil), family(m.evictions, nil, nil),
		family(m.stale, nil, nil), family(m.entries, nil, nil),
		family(m.prefetches, nil, nil), family(m.prefetchSkipped, nil, nil),
	}
	for _, f := range fs {
		if err := reg.Register(f); err != nil {
			return fmt.Errorf("register %s: %w", f.Name, err)
		}
	}
	return nil
}

var familyTypes = map[metrics.Type]metric.Type{
	metrics.CounterType:   metric.Counter,
	metrics.GaugeType:     metric.Gauge,
	metrics.HistogramType: metric.Histogram,
}

// family is the one-family collector c as a pkg/metric Family.
func family(c metrics.Collector, labels []string, buckets []float64) metric.Family {
	d := c.Describe()[0]
	return metric.Family{
		Name: d.Name, Help: d.Help, Type: familyTypes[d.Type], Labels: labels, Buckets: buckets,
		Collect: func(emit func(metric.Series)) {
			metrics.Emit(c, metrics.Emitter{
				Sample: func(_, values []string, v float64) {
					emit(metric.Series{LabelValues: values, Value: v})
				},
				Histogram: func(_, values []string, cum []uint64, sum float64) {
					emit(metric.Series{LabelValues: values, Counts: cum, Sum: sum})
				},
			})
		},
	}
}
