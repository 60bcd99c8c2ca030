package view

import "github.com/prometheus/client_golang/prometheus"

// encoder counts the encodings of responses; the counters prove that a
// version is encoded once per view, not once per agent.
type encoder struct {
	marshals *prometheus.CounterVec
	bytes    *prometheus.CounterVec
	views    prometheus.Gauge
}

func newEncoder(reg prometheus.Registerer) (*encoder, error) {
	e := &encoder{
		marshals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_controlplane_marshals_total",
			Help: "Responses encoded, by kind (full|delta); once per view version and base, shared by all agents of the view.",
		}, []string{"kind"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_controlplane_marshal_bytes_total",
			Help: "Bytes of responses encoded, by kind (full|delta).",
		}, []string{"kind"}),
		views: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshdns_controlplane_views",
			Help: "Distinct views (namespace and cluster domain) kept.",
		}),
	}
	for _, c := range []prometheus.Collector{e.marshals, e.bytes, e.views} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	for _, k := range []string{"full", "delta"} {
		e.marshals.WithLabelValues(k)
		e.bytes.WithLabelValues(k)
	}
	return e, nil
}

func (e *encoder) marshalled(kind string, n int) {
	e.marshals.WithLabelValues(kind).Inc()
	e.bytes.WithLabelValues(kind).Add(float64(n))
}
