package webhook

import (
	"github.com/prometheus/client_golang/prometheus"
)

// metrics of the webhook; every label has a small fixed set of values.
type metrics struct {
	// requests by outcome: injected, skipped, error (internal, pod allowed
	// or denied per Config.FailClosed), denied (a pod that would escape an
	// enforcing DNS policy), malformed (HTTP 4xx), busy (HTTP 503: no
	// review slot in time).
	requests *prometheus.CounterVec
	// skipped by reason: opt_out, not_opted_in, host_network,
	// already_injected, not_a_pod.
	skipped  *prometheus.CounterVec
	duration prometheus.Histogram
	// reloads of the template file by result (ok, error).
	reloads *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_webhook_requests_total",
			Help: "Admission reviews handled, by outcome (injected, skipped, error, denied, malformed, busy).",
		}, []string{"outcome"}),
		skipped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_webhook_skipped_total",
			Help: "Pods left alone, by reason.",
		}, []string{"reason"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meshdns_webhook_request_duration_seconds",
			Help:    "Time to answer one admission review.",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5},
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_webhook_template_reloads_total",
			Help: "Reloads of the injection template file, by result (ok, error).",
		}, []string{"result"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.skipped, m.duration, m.reloads} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
