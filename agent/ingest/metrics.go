package ingest

import (
	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/pkg/metric"
)

type metrics struct {
	entries    *meshmetrics.Gauge
	info       *meshmetrics.GaugeVec   // version, source
	updates    *meshmetrics.CounterVec // source
	rejections *meshmetrics.CounterVec // source
	applies    *meshmetrics.CounterVec // strategy
	build      *meshmetrics.Histogram
	lastUpdate *meshmetrics.Gauge
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
		applies: meshmetrics.NewCounterVec(meshmetrics.Opts{
			Name: "meshdns_agent_table_applies_total",
			Help: "Table versions made, by the planner's strategy (build, patch, staged), whether or not they were then valid.",
		}, []string{"strategy"}),
		build: meshmetrics.NewHistogram(meshmetrics.HistogramOpts{
			Name:    "meshdns_agent_table_build_duration_seconds",
			Help:    "Time to validate a NameTable and build its lookup table.",
			Buckets: metric.ExponentialBuckets(0.0001, 4, 10),
		}),
		lastUpdate: meshmetrics.NewGauge(meshmetrics.Opts{
			Name: "meshdns_agent_table_last_update_timestamp_seconds",
			Help: "Unix time at which the table being served was applied.",
		}),
	}
	for _, s := range sources {
		m.updates.WithLabelValues(s)
		m.rejections.WithLabelValues(s)
	}
	for _, s := range strategies {
		m.applies.WithLabelValues(s)
	}
	if err := meshmetrics.RegisterAll(reg, "ingest", []meshmetrics.Collector{m.entries, m.info, m.updates, m.rejections, m.applies, m.build, m.lastUpdate}); err != nil {
		return nil, err
	}
	return m, nil
}
