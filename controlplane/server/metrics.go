package server

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	agents      prometheus.Gauge
	pushes      *prometheus.CounterVec
	pushBytes   *prometheus.CounterVec
	nacks       prometheus.Counter
	pushLatency prometheus.Histogram
	programming prometheus.Histogram
	streams     *prometheus.CounterVec
}

// latencyBuckets span 1ms to ~16s: a push to 1,000 agents should land
// well under a second.
var latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 15)

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		agents: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshdns_controlplane_agents_connected",
			Help: "Agent streams currently connected.",
		}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_controlplane_pushes_total",
			Help: "Responses sent to agents, by kind (full|delta).",
		}, []string{"kind"}),
		pushBytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_controlplane_push_bytes_total",
			Help: "Bytes of responses sent to agents, by kind (full|delta).",
		}, []string{"kind"}),
		nacks: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshdns_controlplane_nacks_total",
			Help: "Responses agents rejected (NACK).",
		}),
		pushLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meshdns_controlplane_push_duration_seconds",
			Help:    "From a version's publication (or the agent's connect, if later) to the agent's ACK of it.",
			Buckets: latencyBuckets,
		}),
		programming: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meshdns_controlplane_dns_programming_duration_seconds",
			Help:    "From a change at a source (Snapshot.Changed) to an agent's ACK of the version holding it.",
			Buckets: latencyBuckets,
		}),
		streams: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_controlplane_streams_total",
			Help: "Agent streams ended, by result (ok|error|invalid).",
		}, []string{"result"}),
	}
	for _, c := range []prometheus.Collector{m.agents, m.pushes, m.pushBytes, m.nacks, m.pushLatency, m.programming, m.streams} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Pre-create the label values so dashboards see zeros, not gaps.
	for _, k := range []string{"full", "delta"} {
		m.pushes.WithLabelValues(k)
		m.pushBytes.WithLabelValues(k)
	}
	for _, r := range []string{"ok", "error", "invalid"} {
		m.streams.WithLabelValues(r)
	}
	return m, nil
}
