package discovery

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	connected   prometheus.Gauge
	connects    *prometheus.CounterVec // result: ok, error
	responses   *prometheus.CounterVec // kind: full, delta; result: ack, nack
	stateWrites *prometheus.CounterVec // result: ok, error
	lastApplied prometheus.Gauge
	backoff     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshdns_discovery_connected",
			Help: "1 while a NameTable stream to a control plane is open.",
		}),
		connects: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_discovery_connects_total",
			Help: "Stream attempts to a control plane, by result (ok, error).",
		}, []string{"result"}),
		responses: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_discovery_responses_total",
			Help: "NameTable responses received, by kind (full, delta) and result (ack, nack).",
		}, []string{"kind", "result"}),
		stateWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_discovery_state_writes_total",
			Help: "Writes of the persisted table to the state directory, by result (ok, error).",
		}, []string{"result"}),
		lastApplied: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshdns_discovery_last_applied_timestamp_seconds",
			Help: "Unix time at which the last streamed table was applied.",
		}),
		backoff: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshdns_discovery_backoff_seconds",
			Help: "The last wait before reconnecting after every control plane failed.",
		}),
	}
	for _, r := range []string{"ok", "error"} {
		m.connects.WithLabelValues(r)
		m.stateWrites.WithLabelValues(r)
	}
	for _, k := range []string{"full", "delta"} {
		for _, r := range []string{"ack", "nack"} {
			m.responses.WithLabelValues(k, r)
		}
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.connected, m.connects, m.responses, m.stateWrites, m.lastApplied, m.backoff} {
		if err := reg.Register(c); err != nil {
			return nil, errors.Join(errors.New("discovery: register metrics"), err)
		}
	}
	return m, nil
}
