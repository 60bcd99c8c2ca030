package kubesource

import (
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// RESTConfig says how to reach the API server: the kubeconfig file when
// kubeconfig is set; else the pod's service account when running in a
// pod (KUBERNETES_SERVICE_HOST and _PORT set); else nil, which turns the
// Kubernetes source off (a control plane serving only entry files, on a VM
// or a laptop).
func RESTConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
		}
		return withUserAgent(cfg), nil
	}
	cfg, err := rest.InClusterConfig()
	if errors.Is(err, rest.ErrNotInCluster) {
		return nil, nil
	}
	if err != nil {
		// In a pod (the service variables are set) but the service
		// account token is missing: a misconfiguration worth stopping for.
		return nil, fmt.Errorf("in-cluster config: %w", err)
	}
	return withUserAgent(cfg), nil
}

func withUserAgent(cfg *rest.Config) *rest.Config {
	cfg.UserAgent = "meshdns-controlplane"
	return cfg
}

// NewClient returns a Client for RESTConfig(kubeconfig), or nil when the
// Kubernetes source is off.
func NewClient(kubeconfig string) (Client, error) {
	cfg, err := RESTConfig(kubeconfig)
	if err != nil || cfg == nil {
		return nil, err
	}
	return NewClientForConfig(cfg)
}
