package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane"
)

// drainFlags say how a replica leaves: on SIGTERM it reports not ready
// and keeps serving until its pod is no ready endpoint of --drain-service
// (read through the API server), or --drain-timeout passes. Pods the API
// server sends to the webhook meanwhile are still injected, so a rolling
// restart admits none uninjected (failurePolicy Ignore would).
type drainFlags struct {
	timeout time.Duration
	service string
}

func newDrainFlags(fs *flag.FlagSet) *drainFlags {
	f := &drainFlags{}
	fs.DurationVar(&f.timeout, "drain-timeout", 0, "on SIGTERM, keep serving (not ready) up to this long until the pod is out of --drain-service's endpoints (0: stop at once)")
	fs.StringVar(&f.service, "drain-service", "meshdns-controlplane", "Service whose EndpointSlices say when this replica (POD_NAME in POD_NAMESPACE) no longer gets traffic; without API access the drain waits the whole --drain-timeout")
	return f
}

// kubeProxyGrace is how long the drain goes on after the endpoints say the
// pod is out: kube-proxy on every node (and the API server's own service
// resolution) follows the EndpointSlice a moment later.
const kubeProxyGrace = 3 * time.Second

func (f *drainFlags) apply(cfg *controlplane.Config, rc *rest.Config) error {
	if f.timeout < 0 {
		return cli.Usagef("--drain-timeout %v is negative", f.timeout)
	}
	cfg.DrainTimeout = f.timeout
	pod, ns := os.Getenv("POD_NAME"), os.Getenv("POD_NAMESPACE")
	if f.timeout == 0 || f.service == "" || rc == nil || pod == "" || ns == "" {
		return nil
	}
	k, err := newKubeREST(rc)
	if err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	list := func(ctx context.Context, opts metav1.ListOptions) ([]discoveryv1.EndpointSlice, error) {
		var l discoveryv1.EndpointSliceList
		err := k.list(ctx, k.discovery, ns, "endpointslices", opts, &l)
		return l.Items, err
	}
	cfg.Drained = func(ctx context.Context) error {
		return outOfEndpoints(ctx, list, f.service, pod, time.Second, kubeProxyGrace)
	}
	return nil
}

// outOfEndpoints polls the EndpointSlices of service every interval until
// none lists pod as a ready endpoint, then waits grace. It returns the last
// API error when ctx ends first.
func outOfEndpoints(ctx context.Context, list func(context.Context, metav1.ListOptions) ([]discoveryv1.EndpointSlice, error), service, pod string, interval, grace time.Duration) error {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	var lastErr error
	for {
		slices, err := list(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + service})
		if err == nil && !listsReady(slices, pod) {
			select {
			case <-time.After(grace):
			case <-ctx.Done():
			}
			return nil
		}
		if err != nil {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if lastErr != nil {
				return lastErr
			}
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// listsReady reports whether any slice has pod as a ready endpoint (an
// absent ready condition means ready, as the API defines it).
func listsReady(slices []discoveryv1.EndpointSlice, pod string) bool {
	for _, s := range slices {
		for _, e := range s.Endpoints {
			if e.TargetRef != nil && e.TargetRef.Kind == "Pod" && e.TargetRef.Name == pod &&
				(e.Conditions.Ready == nil || *e.Conditions.Ready) {
				return true
			}
		}
	}
	return false
}
