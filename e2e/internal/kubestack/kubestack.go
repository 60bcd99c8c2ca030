// Package kubestack runs the control plane (its Kubernetes source) and one
// agent in-process against a test API server, as the end-to-end tests of
// the Kubernetes path need them.
package kubestack

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshdns/meshdns/agent"
	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/kubesource"
	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/internal/kubetest"
)

// Stack is a running control plane and the agent of one pod.
type Stack struct {
	DNS      string               // the agent's DNS address (UDP and TCP)
	Registry *prometheus.Registry // the control plane's metrics
	Admin    string               // the control plane's admin URL (http://host:port)
}

// Options are Start's settings beyond the defaults.
type Options struct {
	// TTL is the agent's table TTL; zero: its default.
	TTL uint32
	// SettingsParts fill the agent's settings (controlplane.Config).
	SettingsParts []agentsettings.Part
	// Source are the Kubernetes source's options (CoreDNS's kubernetes
	// plugin options).
	Source kubesource.Options
	// ForwardPods is the agent's --pod-records forward.
	ForwardPods bool
	// Sources run beside the Kubernetes source (the multi-cluster one).
	Sources []registry.Source
}

// Start runs the control plane, watching c with the production client as
// cmd/meshdns builds it, and an agent for a pod client-0 in podNS that
// forwards to upstream with the kubelet's search list. ttl is the agent's
// table TTL (zero: its default). Both stop at the test's cleanup, which
// fails the test if either returned an error.
func Start(t testing.TB, c *kubetest.Cluster, podNS, upstream string, ttl uint32) *Stack {
	t.Helper()
	return StartWith(t, c, podNS, upstream, Options{TTL: ttl})
}

// StartWith is Start with options.
func StartWith(t testing.TB, c *kubetest.Cluster, podNS, upstream string, o Options) *Stack {
	t.Helper()
	ttl := o.TTL
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	reg := prometheus.NewRegistry()
	client, err := kubesource.NewClientForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	src, err := kubesource.New(kubesource.Config{Client: client, Logger: log, Registerer: reg, Options: o.Source})
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cp, err := controlplane.New(controlplane.Config{
		GRPCListener: gl, AdminListener: al, Sources: append([]registry.Source{src}, o.Sources...),
		Debounce: 20 * time.Millisecond, Logger: log, Registerer: reg, Gatherer: reg, SettingsParts: o.SettingsParts,
	})
	if err != nil {
		t.Fatal(err)
	}
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.1\nsearch "+strings.Join(SearchList(podNS), " ")+"\noptions ndots:5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{
		DNSAddrs: []string{"127.0.0.1:0"}, AdminAddr: "-", ResolvConf: resolv, Upstreams: []string{upstream},
		Namespace: podNS, PodName: "client-0", ControlPlanes: []string{gl.Addr().String()},
		TTL: ttl, CacheSize: -1, ForwardPods: o.ForwardPods, Logger: log,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cpDone, agentDone := make(chan error, 1), make(chan error, 1)
	go func() { cpDone <- cp.Run(ctx) }()
	go func() { agentDone <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		for name, ch := range map[string]chan error{"agent": agentDone, "control plane": cpDone} {
			if err := <-ch; err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	})
	return &Stack{DNS: a.DNSAddr().String(), Registry: reg, Admin: "http://" + al.Addr().String()}
}

// SearchList is the resolv.conf search list the kubelet writes for a pod
// in podNS, and the one Start gives the agent.
func SearchList(podNS string) []string {
	return []string{podNS + ".svc.cluster.local", "svc.cluster.local", "cluster.local"}
}
