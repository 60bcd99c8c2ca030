package main

import (
	"flag"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane"
)

// quarantineFlags set when the control plane quarantines a table agents
// report crashing on (controlplane/README.md, "Poisoned versions").
type quarantineFlags struct {
	minAgents int
	fraction  float64
}

func newQuarantineFlags(fs *flag.FlagSet) *quarantineFlags {
	f := &quarantineFlags{}
	fs.IntVar(&f.minAgents, "quarantine-min-agents", 3, "agents of a view that must report crashing on its table (and restored their last good one) before the table is quarantined, unless --quarantine-fraction of the view's agents is more")
	fs.Float64Var(&f.fraction, "quarantine-fraction", 0.01, "fraction of a view's connected agents that must report crashing on its table before it is quarantined, when more than --quarantine-min-agents")
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
	cfg.QuarantineMinAgents, cfg.QuarantineFraction = f.minAgents, f.fraction
	return nil
}
