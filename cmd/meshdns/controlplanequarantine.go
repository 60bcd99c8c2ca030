package main

import (
	"flag"
	"time"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane"
)

// quarantineFlags set when the control plane quarantines a table agents
// report crashing on, and how long a silent canary holds a new version
// back (controlplane/README.md, "Poisoned versions").
type quarantineFlags struct {
	minAgents     int
	fraction      float64
	canaryTimeout time.Duration
}

func newQuarantineFlags(fs *flag.FlagSet) *quarantineFlags {
	f := &quarantineFlags{}
	fs.IntVar(&f.minAgents, "quarantine-min-agents", 3, "agents of a view that must report crashing on its table (and restored their last good one) before the table is quarantined, unless --quarantine-fraction of the view's agents is more")
	fs.Float64Var(&f.fraction, "quarantine-fraction", 0.01, "fraction of a view's connected agents that must report crashing on its table before it is quarantined, when more than --quarantine-min-agents")
	fs.DurationVar(&f.canaryTimeout, "canary-timeout", 30*time.Second, "how long a canary of a view's new version whose stream ended before it applied it holds the version back from the view's other agents, waiting for its pod to reconnect and report a crash; then another agent replaces it")
	return f
}

// apply sets cfg's quarantine threshold.
func (f *quarantineFlags) apply(cfg *controlplane.Config) error {
	if f.minAgents < 1 {
		return cli.Usagef("--quarantine-min-agents %d: want 1 or more", f.minAgents)
	}
	if f.fraction <= 0 || f.fraction > 1 {
		return cli.Usagef("--quarantine-fraction %v: want more than 0, at most 1", f.fraction)
	}
	if f.canaryTimeout <= 0 {
		return cli.Usagef("--canary-timeout %v: want more than 0", f.canaryTimeout)
	}
	cfg.QuarantineMinAgents, cfg.QuarantineFraction, cfg.CanaryTimeout = f.minAgents, f.fraction, f.canaryTimeout
	return nil
}
