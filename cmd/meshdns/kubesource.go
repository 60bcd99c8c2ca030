package main

import (
	"flag"
	"log/slog"

	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/kubesource"
)

// kubeFlags are the Kubernetes source's flags of `meshdns controlplane`.
// The source is on with --kubeconfig, or inside a pod (in-cluster config).
type kubeFlags struct {
	kubeconfig    string
	namespaces    cli.StringList
	labelSelector string
	opts          *kubeOptionFlags
}

func newKubeFlags(fs *flag.FlagSet) *kubeFlags {
	f := &kubeFlags{}
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file of the cluster to watch; empty: the pod's service account when run in a pod, else no Kubernetes source")
	fs.Var(&f.namespaces, "namespaces", "namespaces whose Services are watched (repeatable; default all)")
	fs.StringVar(&f.labelSelector, "label-selector", "", "watch only Services matching this label selector (kubectl -l syntax)")
	f.opts = newKubeOptionFlags(fs)
	return f
}

// apply adds the Kubernetes source to cfg when an API server is
// configured (rc not nil). The source reports once its informers have
// synced, and the control plane serves no table before every source has
// reported, so no agent answers a cluster name from a partial list.
func (f *kubeFlags) apply(cfg *controlplane.Config, log *slog.Logger, rc *rest.Config) error {
	if rc == nil {
		if len(f.namespaces) > 0 || f.labelSelector != "" || f.opts.set() {
			return cli.Usagef("--namespaces, --label-selector and the kubernetes plugin options need --kubeconfig or an in-cluster service account")
		}
		log.Info("no kubeconfig and not in a pod: Kubernetes source off")
		return nil
	}
	// client-go logs (watch errors, relists) through klog; send them to
	// the control plane's logger so every line has one format. klog is
	// process-global, which only main may touch.
	klog.SetSlogLogger(log.With("component", "client-go"))
	client, err := kubesource.NewClientForConfig(rc)
	if err != nil {
		return err
	}
	opts, err := f.opts.options(cfg.ClusterDomain)
	if err != nil {
		return err
	}
	src, err := kubesource.New(kubesource.Config{
		Client:        client,
		Namespaces:    f.namespaces,
		LabelSelector: f.labelSelector,
		ClusterDomain: cfg.ClusterDomain,
		Logger:        log.With("component", "kubesource"),
		Registerer:    cfg.Registerer,
		Options:       opts,
	})
	if err != nil {
		return err
	}
	cfg.Sources = append(cfg.Sources, src)
	return nil
}
