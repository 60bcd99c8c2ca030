package discovery

import (
	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
)

type metrics struct {
	connected   *meshmetrics.Gauge
	connects    *meshmetrics.CounterVec // result: ok, error
	responses   *meshmetrics.CounterVec // kind: full, delta; result: ack, nack
	stateWrites *meshmetrics.CounterVec // result: ok, error
	lastApplied *meshmetrics.Gauge
	backoff     *meshmetrics.Gauge
}

func newMetrics(reg *meshmetrics.Registry) (*metrics, error) {
	m := &metrics{
		connected: meshmetrics.NewGauge(meshmetrics.Opts{
			Name: "meshdns_discovery_connected",
			Help: "1 while a NameTable stream to a control plane is open.",
		}),
		connects: meshmetrics.NewCounterVec(meshmetrics.Opts{
			Name: "meshdns_discovery_connects_total",
			Help: "Stream attempts to a control plane, by result (ok, error).",
		}, []string{"result"}),
		responses: meshmetrics.NewCounterVec(meshmetrics.Opts{
			Name: "meshdns_discovery_responses_total",
			Help: "NameTable responses received, by kind (full, delta) and result (ack, nack).",
		}, []string{"kind", "result"}),
		stateWrites: meshmetrics.NewCounterVec(meshmetrics.Opts{
			Name: "meshdns_discovery_state_writes_total",
			Help: "Writes of the persisted table to the state directory, by result (ok, error).",
		}, []string{"result"}),
		lastApplied: meshmetrics.NewGauge(meshmetrics.Opts{
			Name: "meshdns_discovery_last_applied_timestamp_seconds",
			Help: "Unix time at which the last streamed table was applied.",
		}),
		backoff: meshmetrics.NewGauge(meshmetrics.Opts{
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
	if err := meshmetrics.RegisterAll(reg, "discovery", []meshmetrics.Collector{m.connected, m.connects, m.responses, m.stateWrites, m.lastApplied, m.backoff}); err != nil {
		return nil, err
	}
	return m, nil
}
