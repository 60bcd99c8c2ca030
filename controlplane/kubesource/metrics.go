package kubesource

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	events      *prometheus.CounterVec
	snapshots   prometheus.Counter
	entries     prometheus.Gauge
	synced      prometheus.Gauge
	rebuild     prometheus.Histogram
	annotations prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshdns_controlplane_kube_events_total",
			Help: "Informer events received, by kind (service|endpointslice) and event (add|update|delete).",
		}, []string{"kind", "event"}),
		snapshots: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshdns_controlplane_kube_snapshots_total",
			Help: "Snapshots sent to the registry (events that change no answer send none).",
		}),
		entries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshdns_controlplane_kube_entries",
			Help: "Services in the last snapshot sent.",
		}),
		synced: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshdns_controlplane_kube_synced",
			Help: "1 once the Service and EndpointSlice informers have synced and the cluster zone is reported.",
		}),
		rebuild: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "meshdns_controlplane_kube_rebuild_duration_seconds",
			Help:    "Time to rebuild the changed services and assemble a snapshot.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
		annotations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshdns_controlplane_kube_invalid_annotations_total",
			Help: "Service rebuilds that ignored values of the meshdns.io/export-to annotation.",
		}),
	}
	for _, c := range []prometheus.Collector{m.events, m.snapshots, m.entries, m.synced, m.rebuild, m.annotations} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
