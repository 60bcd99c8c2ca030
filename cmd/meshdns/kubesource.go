//go:build !agentonly

package main

import (
	"flag"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/klog/v2"

	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/kubesource"
)

// kubeFlags are the Kubernetes source's flags of `meshdns controlplane`.
// The source is on with --kubeconfig, or inside a pod (in-cluster config).
type kubeFlags struct {
	kubeconfig    string
	namespaces    stringList
	labelSelector string
}

func newKubeFlags(fs *flag.FlagSet) *kubeFlags {
	f := &kubeFlags{}
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file of the cluster to watch; empty: the pod's service account when run in a pod, else no Kubernetes source")
	fs.Var(&f.namespaces, "namespaces", "namespaces whose Services are watched (repeatable; default all)")
	fs.StringVar(&f.labelSelector, "label-selector", "", "watch only Services matching this label selector (kubectl -l syntax)")
	return f
}

// apply adds the Kubernetes source to cfg when an API server is
// configured. The registry does not wait for it before the first version:
// until the informers sync the cluster zone is not reported, so agents
// forward cluster names to the cluster's DNS meanwhile instead of
// answering them.
func (f *kubeFlags) apply(cfg *controlplane.Config, log *slog.Logger) error {
	client, err := kubesource.NewClient(f.kubeconfig)
	if err != nil {
		return err
	}
	if client == nil {
		if len(f.namespaces) > 0 || f.labelSelector != "" {
			return usagef("--namespaces and --label-selector need --kubeconfig or an in-cluster service account")
		}
		log.Info("no kubeconfig and not in a pod: Kubernetes source off")
		return nil
	}
	// client-go logs (watch errors, relists) through klog; send them to
	// the control plane's logger so every line has one format. klog is
	// process-global, which only main may touch.
	klog.SetSlogLogger(log.With("component", "client-go"))
	// One registry for every component, so /metrics shows the source's
	// metrics too; the same default controlplane.New would make.
	if cfg.Registerer == nil && cfg.Gatherer == nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		cfg.Registerer, cfg.Gatherer = reg, reg
	}
	src, err := kubesource.New(kubesource.Config{
		Client:        client,
		Namespaces:    f.namespaces,
		LabelSelector: f.labelSelector,
		ClusterDomain: cfg.ClusterDomain,
		Logger:        log.With("component", "kubesource"),
		Registerer:    cfg.Registerer,
	})
	if err != nil {
		return err
	}
	cfg.Sources = append(cfg.Sources, src)
	return nil
}
