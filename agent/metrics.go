package agent

import (
	"fmt"

	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
)

// Sources of a table, the bounded values of the source label.
const (
	sourceFile         = "file"
	sourceControlPlane = "controlplane"
	sourceState        = "state"
	sourceNone         = "none" // no table source: forward everything
)

var tableSources = []string{sourceFile, sourceControlPlane, sourceState, sourceNone}

type metrics struct {
	entries    *meshmetrics.Gauge
	info       *meshmetrics.GaugeVec   // version, source
	updates    *meshmetrics.CounterVec // source
	rejections *meshmetrics.CounterVec // source
	build      *meshmetrics.Histogram
	lastUpdate *meshmetrics.Gauge
	ready      *meshmetrics.Gauge
}

func newMetrics(reg *meshmetrics.Registry) (*metrics, error) {
	m := &metrics{
		entries: meshmetrics.NewGauge(meshmetrics.Opts{
			Name: "meshdns_agent_table_entries",
			Help: "Names in the table being served (keys of the NameTable).",
		}),
		info: meshmetrics.NewGaugeVec(meshmetrics.Opts{
			Name: "meshdns_agent_table_info",
			Help: "1 for the version and source of the table being served.",
		}, []string{"version", "source"}),
		updates: meshmetrics.NewCounterVec(meshmetrics.Opts{
			Name: "meshdns_agent_table_updates_total",
			Help: "Tables applied, by source (file, controlplane, state, none).",
		}, []string{"source"}),
		rejections: meshmetrics.NewCounterVec(meshmetrics.Opts{
			Name: "meshdns_agent_table_rejections_total",
			Help: "Tables rejected (unreadable, invalid or too large); the previous table kept serving.",
		}, []string{"source"}),
		build: meshmetrics.NewHistogram(meshmetrics.HistogramOpts{
			Name:    "meshdns_agent_table_build_duration_seconds",
			Help:    "Time to validate a NameTable and build its lookup table.",
			Buckets: meshmetrics.ExponentialBuckets(0.0001, 4, 10),
		}),
		lastUpdate: meshmetrics.NewGauge(meshmetrics.Opts{
			Name: "meshdns_agent_table_last_update_timestamp_seconds",
			Help: "Unix time at which the table being served was applied.",
		}),
		ready: meshmetrics.NewGauge(meshmetrics.Opts{
			Name: "meshdns_agent_ready",
			Help: "1 once /healthz/ready reports ready.",
		}),
	}
	for _, s := range tableSources {
		m.updates.WithLabelValues(s)
		m.rejections.WithLabelValues(s)
	}
	for _, c := range []meshmetrics.Collector{m.entries, m.info, m.updates, m.rejections, m.build, m.lastUpdate, m.ready} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register agent metrics: %w", err)
		}
	}
	return m, nil
}

// Results of one iptables check, the bounded values of the result label.
const (
	checkOK    = "ok"
	checkDrift = "drift"
	checkError = "error"
)

// iptablesMetrics are registered only when the agent checks its rules, so
// an agent that does not check exports no drift gauge that reads "no
// drift".
type iptablesMetrics struct {
	drift   *meshmetrics.Gauge
	checks  *meshmetrics.CounterVec // result: ok, drift, error
	repairs *meshmetrics.CounterVec // result: ok, error; nil without repair
}

func newIPTablesMetrics(reg *meshmetrics.Registry, repair bool) (*iptablesMetrics, error) {
	m := &iptablesMetrics{
		drift: meshmetrics.NewGauge(meshmetrics.Opts{
			Name: "meshdns_iptables_drift",
			Help: "1 while the capture rules differ from the wanted ones (after any repair), as of the last successful check.",
		}),
		checks: meshmetrics.NewCounterVec(meshmetrics.Opts{
			Name: "meshdns_iptables_checks_total",
			Help: "Checks of the capture rules, by result (ok, drift, error).",
		}, []string{"result"}),
	}
	for _, r := range []string{checkOK, checkDrift, checkError} {
		m.checks.WithLabelValues(r)
	}
	cs := []meshmetrics.Collector{m.drift, m.checks}
	if repair {
		m.repairs = meshmetrics.NewCounterVec(meshmetrics.Opts{
			Name: "meshdns_iptables_repairs_total",
			Help: "Re-applications of drifted capture rules, by result (ok, error).",
		}, []string{"result"})
		m.repairs.WithLabelValues(checkOK)
		m.repairs.WithLabelValues(checkError)
		cs = append(cs, m.repairs)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register iptables metrics: %w", err)
		}
	}
	return m, nil
}
