package agent

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/meshdns/meshdns/iptables"
)

// rulesCheck re-checks the pod's capture rules with iptables.Reconciler
// and turns every outcome into metrics, and into a log line when
// the outcome changes: a pod whose rules stay broken, or whose agent may
// not read them, logs once, not every interval.
type rulesCheck struct {
	mgr      *iptables.Manager
	interval time.Duration
	repair   bool
	m        *iptablesMetrics
	log      *slog.Logger

	// last is the previous outcome (checkOK, checkDrift, checkError; ""
	// before the first). Only the Reconciler's goroutine touches it.
	last string
}

// newRulesCheck checks cfg.IPTables and registers the iptables metrics; it
// runs nothing.
func newRulesCheck(cfg Config) (*rulesCheck, error) {
	mgr, err := iptables.New(cfg.IPTables)
	if err != nil {
		return nil, fmt.Errorf("iptables check: %w", err)
	}
	m, err := newIPTablesMetrics(cfg.Registry, cfg.IPTablesRepair)
	if err != nil {
		return nil, err
	}
	return &rulesCheck{mgr: mgr, interval: cfg.IPTablesCheckInterval, repair: cfg.IPTablesRepair, m: m, log: cfg.Logger}, nil
}

// Run checks at once, then every interval until ctx ends; it returns nil
// then. A failed check never stops the agent.
func (c *rulesCheck) Run(ctx context.Context) error {
	rec, err := iptables.NewReconciler(iptables.ReconcilerConfig{
		Manager:  c.mgr,
		Interval: c.interval,
		Repair:   c.repair,
		OnCheck:  func(drift bool, err error) { c.observe(ctx, drift, err) },
		// No Logger: the Reconciler would log every failing or drifting
		// tick; observe logs the changes.
	})
	if err != nil {
		return err
	}
	c.log.Info("checking iptables rules", "interval", c.interval, "repair", c.repair)
	return rec.Run(ctx)
}

// observe records the outcome of one check. With repair, a drift repaired
// leaves the gauge at 0: the rules match again, and the repairs counter
// shows what happened. A failed check leaves the gauge as it was.
func (c *rulesCheck) observe(ctx context.Context, drift bool, err error) {
	prev := c.last
	switch {
	case err != nil && !drift:
		c.m.checks.WithLabelValues(checkError).Inc()
		c.last = checkError
		if prev != checkError {
			c.log.Warn("iptables check failed (reading the rules needs CAP_NET_ADMIN); drift is not reported until a check succeeds", "err", err)
		}
	case drift && c.repair && err == nil:
		c.m.checks.WithLabelValues(checkDrift).Inc()
		c.m.repairs.WithLabelValues(checkOK).Inc()
		c.m.drift.Set(0)
		c.last = checkOK
		// Every repair is logged: it changed the pod's rules.
		c.log.Warn("iptables rules drifted and were repaired")
	case drift && c.repair:
		c.m.checks.WithLabelValues(checkDrift).Inc()
		c.m.repairs.WithLabelValues(checkError).Inc()
		c.m.drift.Set(1)
		c.last = checkDrift
		if prev != checkDrift {
			c.log.Warn("iptables rules drifted and the repair failed", "err", err)
		}
	case drift:
		c.m.checks.WithLabelValues(checkDrift).Inc()
		c.m.drift.Set(1)
		c.last = checkDrift
		if prev != checkDrift {
			// One more read, only when drift appears, to say what drifted.
			d, derr := c.mgr.Diff(ctx)
			if derr != nil {
				c.log.Warn("iptables rules drifted", "err", derr)
				return
			}
			c.log.Warn("iptables rules drifted", "diff", strings.Join(d, "; "))
		}
	default:
		c.m.checks.WithLabelValues(checkOK).Inc()
		c.m.drift.Set(0)
		c.last = checkOK
		if prev != checkOK {
			c.log.Info("iptables rules match")
		}
	}
}
