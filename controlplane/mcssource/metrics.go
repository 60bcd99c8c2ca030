package mcssource

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	present   prometheus.Gauge
	synced    prometheus.Gauge
	imports   prometheus.Gauge
	snapshots prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		present: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshdns_controlplane_mcs_crd_present",
			Help: "1 while the API server serves ServiceImports (multicluster.x-k8s.io/v1alpha1).",
		}),
		synced: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshdns_controlplane_mcs_synced",
			Help: "1 while the ServiceImport informers are synced and the clusterset zone is reported.",
		}),
		imports: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshdns_controlplane_mcs_imports",
			Help: "ServiceImports in the last snapshot.",
		}),
		snapshots: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshdns_controlplane_mcs_snapshots_total",
			Help: "Snapshots sent to the registry.",
		}),
	}
	for _, c := range []prometheus.Collector{m.present, m.synced, m.imports, m.snapshots} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
