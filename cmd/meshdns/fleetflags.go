package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/meshdns/meshdns/cmd/internal/cli"
)

// fleetFlags are the flags the operator's cluster commands (status, top,
// analyze) share, defined and checked here once: the cluster as kubectl
// finds it (--kubeconfig, else $KUBECONFIG, ~/.kube/config, the pod's
// service account), where meshdns runs, the output and the wait; with
// admin, --admin-addr reads one replica directly instead, and -n/-A
// choose the namespaces shown.
type fleetFlags struct {
	kubeconfig string // "" and "-": the default loading rules
	system     string
	selector   string // admin commands only
	adminAddr  string // "" through the API server
	namespace  string // "" every namespace
	allNS      bool
	output     string
	timeout    time.Duration
}

// fleetOpts say which of the shared flags a command has.
type fleetOpts struct {
	admin     string        // --admin-addr's help, "" for no --admin-addr, --selector, -n or -A
	namespace string        // -n's help
	timeout   time.Duration // --timeout's default
}

func newFleetFlags(fs *flag.FlagSet, o fleetOpts) *fleetFlags {
	f := &fleetFlags{}
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, then ~/.kube/config, then the pod's service account)")
	fs.StringVar(&f.system, "system-namespace", "meshdns-system", "the namespace meshdns is installed in")
	fs.StringVar(&f.output, "output", "table", "table or json")
	cli.Short(fs, "o", "output")
	cli.DurationVar(fs, &f.timeout, "timeout", o.timeout, "how long to wait for the cluster")
	if o.admin == "" {
		return f
	}
	fs.StringVar(&f.selector, "selector", "app.kubernetes.io/name=meshdns-controlplane", "the labels of the control plane's pods")
	fs.StringVar(&f.adminAddr, "admin-addr", "", o.admin+" (host:port or an http:// URL; kubectl -n meshdns-system port-forward deploy/meshdns-controlplane 15014) instead of every replica through the API server")
	fs.StringVar(&f.namespace, "namespace", "", o.namespace)
	cli.Short(fs, "n", "namespace")
	fs.BoolVar(&f.allNS, "all-namespaces", false, "every namespace (the default without --namespace)")
	cli.Short(fs, "A", "all-namespaces")
	return f
}

// parse parses args into fs, whose fleet flags f are, and checks them.
func (f *fleetFlags) parse(fs *flag.FlagSet, args []string) error {
	if err := cli.ParseFlags(fs, args, nil); err != nil {
		return err
	}
	if f.output != "table" && f.output != "json" {
		return cli.Usagef("--output %q: want table or json", f.output)
	}
	if f.allNS && f.namespace != "" {
		return cli.Usagef("--all-namespaces and --namespace %s exclude each other", f.namespace)
	}
	if f.adminAddr != "" && f.kubeconfig != "" {
		return cli.Usagef("--admin-addr and --kubeconfig exclude each other: one replica directly, or every replica through the API server")
	}
	return nil
}

// direct reports whether --admin-addr reads the replicas directly.
func (f *fleetFlags) direct() bool { return f.adminAddr != "" }

// restConfig is the cluster's client configuration.
func (f *fleetFlags) restConfig() (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if f.kubeconfig != "-" { // "-" was the default before it was the default
		rules.ExplicitPath = f.kubeconfig
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w (or read one replica with --admin-addr)", err)
	}
	return rc, nil
}

// read reads the agents of every replica and the injected pods, of
// --namespace only unless it is "".
func (f *fleetFlags) read(ctx context.Context) (*fleetStatus, error) {
	rc, err := f.restConfig()
	if err != nil {
		return nil, err
	}
	return readFleet(ctx, rc, fleetOptions{system: f.system, selector: f.selector, namespace: f.namespace})
}
