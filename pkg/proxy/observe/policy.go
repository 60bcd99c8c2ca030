package observe

import (
	"log/slog"

	"github.com/meshdns/meshdns/pkg/metric"
)

// policyMetrics counts decisions by action and mode.
type policyMetrics [2][2]metric.Counter

var (
	policyActionNames = [2]string{"allow", "deny"}
	policyModeNames   = [2]string{"enforce", "audit"}
)

// count counts a query's final verdict, once per answered query.
func (pm *policyMetrics) count(v *Verdict) {
	mode := 0
	if v.Decision.Audit {
		mode = 1
	}
	pm[v.Decision.Action&1][mode].Inc()
}

func registerPolicyMetrics(reg metric.Registry, pm *policyMetrics) error {
	return reg.Register(metric.Family{
		Name:   "meshdns_policy_decisions_total",
		Help:   "Queries a DNS policy judged, by the final action (allow, deny) and the policy's mode (enforce, audit).",
		Type:   metric.CounterType,
		Labels: []string{"action", "mode"},
		Collect: func(emit func(metric.Series)) {
			for a := range pm {
				for m := range pm[a] {
					emitCount(emit, &pm[a][m], policyActionNames[a], policyModeNames[m])
				}
			}
		},
	})
}

// appendPolicyAttrs adds a denial to a query log line: action (deny),
// mode, the deciding rule (its pattern, or the default) and its source,
// and the CNAME target that was denied.
func appendPolicyAttrs(attrs []slog.Attr, oc *Outcome) []slog.Attr {
	var v PolicyVerdict
	if oc.Policy != nil {
		v = oc.Policy.Describe(oc.Verdict)
	}
	rule := v.Rule
	if rule == "" {
		rule = v.Default
	}
	attrs = append(attrs, slog.String("action", v.Action), slog.String("mode", v.Mode), slog.String("rule", rule))
	if v.Source != "" {
		attrs = append(attrs, slog.String("rule_source", v.Source))
	}
	if v.Chain != "" {
		attrs = append(attrs, slog.String("cname", v.Chain))
	}
	if v.Expansion {
		attrs = append(attrs, slog.Bool("expansion", true))
	}
	return attrs
}
