package registry

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	versions      prometheus.Counter
	version       prometheus.Gauge
	names         prometheus.Gauge
	sourceUpdates *prometheus.CounterVec
	invalid       prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		versions: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshdns_controlplane_versions_total",
			Help: "Model versions built (one per debounced burst of source updates).",
		}),
		version: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshdns_controlplane_version",
			Help: "Sequence number of the current model version.",
		}),
		names: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshdns_controlplane_names",
			Help: "Distinct hostnames in the current model version.",
		}),
		sourceUpdates: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_controlplane_source_updates_total",
			Help: "Snapshots received from sources, by source.",
		}, []string{"source"}),
		invalid: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshdns_controlplane_invalid_entries_total",
			Help: "Entries the registry dropped: no hostname, not UTF-8, or not encodable.",
		}),
	}
	for _, c := range []prometheus.Collector{m.versions, m.version, m.names, m.sourceUpdates, m.invalid} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
