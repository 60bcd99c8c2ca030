package main

import (
	"flag"
	"strings"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/pkg/proxy"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// queryLogFlags set the query log of every agent from the control plane
// (AgentSettings.telemetry.query_log). An agent's own flags are the floor
// beneath it, and a pod's annotation overrides it.
type queryLogFlags struct {
	classes string
	sample  uint
	rate    uint
}

func newQueryLogFlags(fs *flag.FlagSet) *queryLogFlags {
	f := &queryLogFlags{}
	fs.StringVar(&f.classes, "agent-query-log", "", "query log classes every agent writes, comma-separated: denied, nxdomain, servfail, upstream_error or all (empty: the agents' own flags decide)")
	fs.UintVar(&f.sample, "agent-query-log-sample", 0, "with --agent-query-log: log one query in N of each class (0 or 1: every one)")
	fs.UintVar(&f.rate, "agent-query-log-rate", 0, "with --agent-query-log: at most N lines a second per agent (0: the agent's default)")
	return f
}

// apply adds a part that fills every agent's query log.
func (f *queryLogFlags) apply(cfg *controlplane.Config) error {
	if f.classes == "" {
		if f.sample != 0 || f.rate != 0 {
			return cli.Usagef("--agent-query-log-sample and --agent-query-log-rate need --agent-query-log")
		}
		return nil
	}
	if _, err := proxy.ParseQueryLogClasses(f.classes); err != nil {
		return cli.Usagef("--agent-query-log %q: %v", f.classes, err)
	}
	if f.sample > 1<<31 || f.rate > 1<<31 {
		return cli.Usagef("--agent-query-log-sample and --agent-query-log-rate: at most %d", 1<<31)
	}
	var classes []string
	for _, c := range strings.Split(f.classes, ",") {
		classes = append(classes, strings.TrimSpace(c))
	}
	ql := &meshdnsv1.QueryLog{Classes: classes, SampleEvery: uint32(f.sample), MaxPerSecond: uint32(f.rate)}
	cfg.SettingsParts = append(cfg.SettingsParts, agentsettings.Func(func(_ auth.Identity, s *meshdnsv1.AgentSettings) {
		if s.Telemetry == nil {
			s.Telemetry = &meshdnsv1.Telemetry{}
		}
		s.Telemetry.QueryLog = ql
	}))
	return nil
}
