package main

import (
	"flag"
	"log/slog"

	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/forwardsource"
)

// forwardingFlags add the forwarding rules per workload to the agents'
// settings.
type forwardingFlags struct {
	path string
}

func newForwardingFlags(fs *flag.FlagSet) *forwardingFlags {
	f := &forwardingFlags{}
	fs.StringVar(&f.path, "forwarding-rules", "", "file of forwarding rules: stub domains sent to other upstreams for the pods of some namespaces or labels (controlplane/forwardsource), re-read when it changes (empty: none)")
	return f
}

// apply adds the rules file as a settings part. With an API server (rc
// not nil) the pods' labels are watched for rules with a podSelector;
// without one such rules select no pod.
func (f *forwardingFlags) apply(cfg *controlplane.Config, log *slog.Logger, rc *rest.Config) error {
	if f.path == "" {
		return nil
	}
	if err := cli.Readable("--forwarding-rules", f.path); err != nil {
		return err
	}
	fc := forwardsource.FileConfig{Path: f.path, Logger: log.With("component", "forwarding")}
	if rc != nil {
		pods, err := sharedPods(cfg, log, rc)
		if err != nil {
			return err
		}
		fc.Pods = pods
	}
	file, err := forwardsource.NewFile(fc)
	if err != nil {
		return err
	}
	cfg.SettingsParts = append(cfg.SettingsParts, file)
	return nil
}
