package main

import (
	"flag"
	"log/slog"
	"time"

	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/failingreport"
)

// failingFlags choose the agents that send their failing-names report
// (controlplane/failingreport).
type failingFlags struct {
	mode   string
	topN   uint
	window time.Duration
}

func newFailingFlags(fs *flag.FlagSet) *failingFlags {
	f := &failingFlags{}
	fs.StringVar(&f.mode, "failing-report", "off", "agents that report the names failing most for their pod (meshdns top): off, namespaces (those labelled meshdns.io/failing-report=enabled) or all")
	fs.UintVar(&f.topN, "failing-report-top-n", 0, "names per report (0: the agent's default, 10; agents cut it to 50)")
	fs.DurationVar(&f.window, "failing-report-window", 0, "time between an agent's reports, whole seconds (0: the agent's default, 1m; agents clamp it to 5s..1h)")
	return f
}

// apply adds the report's part to the agents' settings.
func (f *failingFlags) apply(cfg *controlplane.Config, log *slog.Logger, rc *rest.Config) error {
	mode, err := failingreport.ParseMode(f.mode)
	if err != nil {
		return cli.Usagef("--failing-report: %v", err)
	}
	if f.window < 0 || f.window%time.Second != 0 {
		return cli.Usagef("--failing-report-window %s: want whole seconds", f.window)
	}
	if mode == failingreport.Off {
		return nil
	}
	if mode == failingreport.Namespaces && rc == nil {
		return cli.Usagef("--failing-report namespaces reads namespace labels: give --kubeconfig (in a pod, its service account is used)")
	}
	p, err := failingreport.New(failingreport.Config{Mode: mode, TopN: uint32(min(f.topN, 1<<31)), Window: f.window, Kube: rc,
		Logger: log.With("component", "failing-report")})
	if err != nil {
		return cli.Usagef("%v", err)
	}
	// In namespaces mode the control plane runs the part's watch (it is
	// an agentsettings.Runner); streams do not wait for it (the report is
	// advisory: until it synced, no namespace is opted in).
	cfg.SettingsParts = append(cfg.SettingsParts, p)
	return nil
}
