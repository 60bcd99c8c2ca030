package main

import (
	"flag"
	"log/slog"

	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/nodezone"
)

// settingsFlags choose the parts of each agent's settings that the
// control plane composes itself (other parts add their own flags).
type settingsFlags struct {
	podZone bool
}

func newSettingsFlags(fs *flag.FlagSet) *settingsFlags {
	f := &settingsFlags{}
	fs.BoolVar(&f.podZone, "pod-zone", true, "send each agent its pod's zone (its node's "+nodezone.Label+" label, through a metadata watch of Nodes) so it answers endpoints of its own zone first; needs the Kubernetes source")
	return f
}

// apply adds the settings parts to cfg. Without an API server (rc nil)
// there are no nodes to read zones from.
func (f *settingsFlags) apply(cfg *controlplane.Config, log *slog.Logger, rc *rest.Config) error {
	if !f.podZone || rc == nil {
		return nil
	}
	lw, err := nodezone.ListerWatcher(rc)
	if err != nil {
		return err
	}
	zones, err := nodezone.New(nodezone.Config{Nodes: lw, Logger: log.With("component", "nodezone")})
	if err != nil {
		return err
	}
	cfg.SettingsParts = append(cfg.SettingsParts, zones)
	return nil
}
