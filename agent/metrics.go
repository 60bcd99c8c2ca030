package agent

import meshmetrics "github.com/meshdns/meshdns/internal/metrics"

// metrics are the agent's own; the table metrics are agent/ingest's.
type metrics struct {
	ready *meshmetrics.Gauge
	// annotationRejects counts pod annotation files whose query log
	// setting was not taken.
	annotationRejects *meshmetrics.Counter
}

func newMetrics(reg *meshmetrics.Registry) (*metrics, error) {
	m := &metrics{
		ready: meshmetrics.NewGauge(meshmetrics.Opts{
			Name: "meshdns_agent_ready",
			Help: "1 once /healthz/ready reports ready.",
		}),
		annotationRejects: meshmetrics.NewCounter(meshmetrics.Opts{
			Name: "meshdns_agent_annotation_rejections_total",
			Help: "Reads of the pod's annotations (--pod-annotations) whose query log setting was invalid; the last good one stayed.",
		}),
	}
	if err := meshmetrics.RegisterAll(reg, "agent", []meshmetrics.Collector{m.ready, m.annotationRejects}); err != nil {
		return nil, err
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
	if err := meshmetrics.RegisterAll(reg, "iptables", cs); err != nil {
		return nil, err
	}
	return m, nil
}
