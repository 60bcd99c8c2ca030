package filesource

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	reloads      prometheus.Counter
	reloadErrors prometheus.Counter
	entries      prometheus.Gauge
	vipErrors    prometheus.Counter
	rejected     prometheus.Gauge
	loaded       prometheus.Gauge
	stateErrors  prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		reloads: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshdns_controlplane_file_reloads_total",
			Help: "Times the entries files were read (at start and whenever they may have changed).",
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
		rejected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshdns_controlplane_file_rejected_files",
			Help: "Entries files whose current content is rejected (unreadable, gone, empty or invalid); each serves its last good version.",
		}),
		loaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshdns_controlplane_file_loaded",
			Help: "1 once every entries path has a good version (read, or restored from the state directory) and the first snapshot went out.",
		}),
		stateErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshdns_controlplane_file_state_errors_total",
			Help: "Failed writes of the last good entries to the state directory.",
		}),
	}
	for _, c := range []prometheus.Collector{m.reloads, m.reloadErrors, m.entries, m.vipErrors, m.rejected, m.loaded, m.stateErrors} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
