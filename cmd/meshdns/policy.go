package main

import (
	"flag"
	"log/slog"

	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/podmeta"
	"github.com/meshdns/meshdns/controlplane/policysource"
)

// policyFlags are the DNS policy flags of `meshdns controlplane`.
type policyFlags struct {
	files     cli.StringList
	watch     bool
	podLabels bool
	status    bool
	// store is the policy store apply built, or nil; the webhook reads it
	// at admission.
	store *policysource.Store
}

func newPolicyFlags(fs *flag.FlagSet) *policyFlags {
	f := &policyFlags{}
	fs.Var(&f.files, "policy-file", "DNSPolicy YAML file or folder of them (repeatable; hot reloaded, a bad file keeps its last good policies)")
	fs.BoolVar(&f.watch, "watch-policies", true, "with a Kubernetes API: serve DNSPolicy objects to the agents they select")
	fs.BoolVar(&f.podLabels, "policy-pod-labels", true, "watch the labels of pods (metadata only) in namespaces where a DNSPolicy selects pods by label; false judges every agent with no labels (VM agents)")
	fs.BoolVar(&f.status, "policy-status", true, "write each DNSPolicy's Accepted status condition")
	return f
}

// apply adds the policy sources to cfg (the API's objects when rc is not
// nil and --watch-policies, the files of --policy-file) and the store they
// feed as the policy part of every agent's settings. The sources hold the
// first version until their policies are in the store.
func (f *policyFlags) apply(cfg *controlplane.Config, log *slog.Logger, rc *rest.Config) error {
	if len(f.files) == 0 && (rc == nil || !f.watch) {
		return nil
	}
	for _, p := range f.files {
		if err := cli.Readable("--policy-file", p); err != nil {
			return err
		}
	}
	store := policysource.NewStore()
	f.store = store
	if rc != nil && f.watch {
		kc := policysource.KubeConfig{Config: rc, Store: store, NoPodLabels: !f.podLabels,
			NoStatus: !f.status, Logger: log.With("component", "policysource")}
		if f.podLabels {
			var err error
			if kc.Pods, err = sharedPods(cfg, log, rc); err != nil {
				return err
			}
		}
		src, err := policysource.NewKube(kc)
		if err != nil {
			return err
		}
		cfg.Sources = append(cfg.Sources, src)
	}
	if len(f.files) > 0 {
		src, err := policysource.NewFile(policysource.FileConfig{Paths: f.files, Store: store, Logger: log.With("component", "policysource")})
		if err != nil {
			return err
		}
		cfg.Sources = append(cfg.Sources, src)
	}
	cfg.SettingsParts = append(cfg.SettingsParts, store)
	return nil
}

// sharedPods returns the control plane's pod label cache, made on first
// use: the forwarding rules and the policies share one.
func sharedPods(cfg *controlplane.Config, log *slog.Logger, rc *rest.Config) (*podmeta.Pods, error) {
	if cfg.Pods == nil {
		p, err := podmeta.New(podmeta.Config{Config: rc, Logger: log.With("component", "podmeta")})
		if err != nil {
			return nil, err
		}
		cfg.Pods = p
	}
	return cfg.Pods, nil
}
