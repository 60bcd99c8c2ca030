package safemode

import (
	"fmt"

	"github.com/meshdns/meshdns/internal/metrics"
)

// safeMetrics are the supervisor's safe mode metrics (agent/README.md,
// "Safe mode").
type safeMetrics struct {
	on      *metrics.Gauge
	entries *metrics.Counter
	queries *metrics.CounterVec
}

func newMetrics(reg *metrics.Registry) (*safeMetrics, error) {
	m := &safeMetrics{
		on: metrics.NewGauge(metrics.Opts{Name: "meshdns_agent_safe_mode",
			Help: "1 while the supervisor answers the pod's queries itself because the agent cannot stay up."}),
		entries: metrics.NewCounter(metrics.Opts{Name: "meshdns_agent_safe_mode_entries_total",
			Help: "Times the supervisor entered safe mode."}),
		queries: metrics.NewCounterVec(metrics.Opts{Name: "meshdns_agent_safe_mode_queries_total",
			Help: "Queries answered in safe mode, by result: forwarded, refused, servfail (no upstream answered) or dropped (not a query)."},
			[]string{"result"}),
	}
	if reg == nil {
		return m, nil
	}
	for _, c := range []metrics.Collector{m.on, m.entries, m.queries} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("safe mode metrics: %w", err)
		}
	}
	return m, nil
}

func (m *safeMetrics) enter() {
	m.on.Set(1)
	m.entries.Inc()
}

func (m *safeMetrics) leave() { m.on.Set(0) }

func (m *safeMetrics) query(result string) { m.queries.WithLabelValues(result).Inc() }
