package iptables

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
)

// Diff compares the live rules with the wanted ones and returns one line
// per difference; none means no drift. Differences are: a chain of ours
// missing or holding other rules, a jump of ours missing or present more
// than once, and a chain of ours that is not wanted. The position of our
// jump in its built-in chain is not checked: another tool inserting above
// it is not drift we can fix without fighting that tool.
func (m *Manager) Diff(ctx context.Context) ([]string, error) {
	var out []string
	err := m.eachLive(ctx, func(_ Backend, f Family, cur Dump) {
		out = append(out, diffRules(Build(m.cfg, f), cur)...)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// Check reports whether the live rules drifted from the wanted ones.
func (m *Manager) Check(ctx context.Context) (drift bool, err error) {
	d, err := m.Diff(ctx)
	if err != nil {
		return false, err
	}
	return len(d) > 0, nil
}

// diffRules is the pure part of Diff.
func diffRules(rs Ruleset, cur Dump) []string {
	var out []string
	f := rs.Family
	for _, t := range rs.tables() {
		td := cur[t]
		if td == nil {
			td = &TableDump{Rules: map[string][]string{}}
		}
		want := map[string]bool{}
		for _, c := range rs.chainsIn(t) {
			want[c.Name] = true
			got, ok := td.Rules[c.Name]
			if !ok && !slices.Contains(td.Chains, c.Name) {
				out = append(out, fmt.Sprintf("%s %s: chain %s missing", f, t, c.Name))
				continue
			}
			var specs []string
			for _, r := range c.Rules {
				specs = append(specs, r.Spec())
			}
			if !slices.Equal(specs, got) {
				out = append(out, fmt.Sprintf("%s %s: chain %s has %d rules, want %d (or they differ)", f, t, c.Name, len(got), len(specs)))
			}
		}
		for _, c := range cur.oursIn(t) {
			if !want[c] {
				out = append(out, fmt.Sprintf("%s %s: unexpected chain %s", f, t, c))
			}
		}
		have := map[string]int{}
		for _, j := range cur.jumpsIn(t) {
			have[j.Chain+" "+j.Spec]++
		}
		for _, j := range rs.jumpsIn(t) {
			key := j.Chain + " " + j.Spec()
			if n := have[key]; n != 1 {
				out = append(out, fmt.Sprintf("%s %s: jump %s -> %s present %d times, want 1", f, t, j.Chain, strings.Join(j.Target, " "), n))
			}
			delete(have, key)
		}
		for k := range have {
			out = append(out, fmt.Sprintf("%s %s: unexpected rule of ours in %s", f, t, k))
		}
	}
	slices.Sort(out)
	return out
}

// ReconcilerConfig configures a Reconciler.
type ReconcilerConfig struct {
	// Manager owns the rules; required.
	Manager *Manager
	// Interval between checks; zero means one minute.
	Interval time.Duration
	// Repair re-applies the rules when drift is found. Off by default:
	// an agent without CAP_NET_ADMIN can only report.
	Repair bool
	// OnCheck, when set, is called after every check with its outcome, for
	// example to set a drift gauge and count errors.
	OnCheck func(drift bool, err error)
	// Logger; nil discards.
	Logger *slog.Logger
}

// Reconciler re-checks the rules periodically (NodeLocal DNSCache keeps its
// rules the same way) and reports, or repairs, drift.
type Reconciler struct {
	cfg ReconcilerConfig
}

// NewReconciler checks cfg and returns a Reconciler; it starts nothing.
func NewReconciler(cfg ReconcilerConfig) (*Reconciler, error) {
	if cfg.Manager == nil {
		return nil, fmt.Errorf("reconciler: Manager is required")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = time.Minute
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Reconciler{cfg: cfg}, nil
}

// Reconcile checks once and, with Repair, re-applies on drift. It returns
// whether drift was found.
func (r *Reconciler) Reconcile(ctx context.Context) (bool, error) {
	d, err := r.cfg.Manager.Diff(ctx)
	if err != nil {
		return false, err
	}
	if len(d) == 0 {
		return false, nil
	}
	r.cfg.Logger.Warn("iptables rules drifted", "diff", strings.Join(d, "; "))
	if r.cfg.Repair {
		if err := r.cfg.Manager.Apply(ctx); err != nil {
			return true, err
		}
		r.cfg.Logger.Info("iptables rules repaired")
	}
	return true, nil
}

// Run checks at once and then every Interval until ctx ends; it returns
// nil then. Check errors are reported through OnCheck and the log, not
// returned: a failed check must not stop the agent.
func (r *Reconciler) Run(ctx context.Context) error {
	t := time.NewTicker(r.cfg.Interval)
	defer t.Stop()
	for {
		drift, err := r.Reconcile(ctx)
		if err != nil && ctx.Err() == nil {
			r.cfg.Logger.Warn("iptables check failed", "err", err)
		}
		if r.cfg.OnCheck != nil && ctx.Err() == nil {
			r.cfg.OnCheck(drift, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
