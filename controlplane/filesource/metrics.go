package filesource

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	reloads      prometheus.Counter
	reloadErrors prometheus.Counter
	entries      prometheus.Gauge
	vipErrors    prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshdns_controlplane_file_reloads_total",
			Help: "Times the entries files were read (on change, and every resync period).",
		}),
		reloadErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshdns_controlplane_file_reload_errors_total",
			Help: "Entries files rejected (unreadable or invalid); the file's last good entries keep serving.",
		}),
		entries: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshdns_controlplane_file_entries",
			Help: "Entries currently served from files.",
		}),
		vipErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshdns_controlplane_file_vip_errors_total",
			Help: "Reloads where a virtual IP pool had too few addresses for the entries without addresses.",
		}),
	}
	for _, c := range []prometheus.Collector{m.reloads, m.reloadErrors, m.entries, m.vipErrors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
