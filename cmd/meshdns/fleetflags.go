package main

import (
	"context"
	"flag"
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
)

// fleetFlags are the flags with which status and top find every control
// plane replica through the API server instead of one admin address:
// --kubeconfig turns that on, --system-namespace and --selector say where
// the replicas' pods are.
type fleetFlags struct {
	kubeconfig string // "" off; "-" the default loading rules
	system     string
	selector   string
}

func newFleetFlags(fs *flag.FlagSet) *fleetFlags {
	f := &fleetFlags{}
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "read every control plane replica through this cluster's API server (port-forward, as kubectl does) instead of --admin-addr; \"-\" for the default ($KUBECONFIG, ~/.kube/config, the pod's service account)")
	fs.StringVar(&f.system, "system-namespace", "meshdns-system", "with --kubeconfig: the control plane's namespace")
	fs.StringVar(&f.selector, "selector", "app.kubernetes.io/name=meshdns-controlplane", "with --kubeconfig: the labels of the control plane's pods")
	return f
}

// on reports whether --kubeconfig was given.
func (f *fleetFlags) on() bool { return f.kubeconfig != "" }

// read reads the agents of every replica and the injected pods, of
// namespace only unless it is "".
func (f *fleetFlags) read(ctx context.Context, namespace string) (*fleetStatus, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	if f.kubeconfig != "-" {
		rules.ExplicitPath = f.kubeconfig
	}
	rc, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return readFleet(ctx, rc, fleetOptions{system: f.system, selector: f.selector, namespace: namespace})
}
