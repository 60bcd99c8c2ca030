// Package kubestack runs the control plane (its Kubernetes source) and one
// agent in-process against a test API server, as the end-to-end tests of
// the Kubernetes path need them.
package kubestack

import (
	"context"
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
	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/kubesource"
	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/internal/testkit/certtest"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
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
	// Namespaces limits the Kubernetes source to these namespaces; nil
	// watches all.
	Namespaces []string
	// Token, when set, is the agent's credential (its token file); the
	// control plane then serves gRPC over TLS, with a certificate of a
	// test CA the agent trusts, and verifies the token with Authenticator.
	Token         string
	Authenticator auth.Authenticator
	// IgnorePodZone is the agent's --zone-aware=false.
	IgnorePodZone bool
}

// Logger is the log of the stack's parts: discarded, or warnings and
// errors on stderr with -v.
func Logger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.DiscardHandler)
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
	log := Logger()
	reg := prometheus.NewRegistry()
	client, err := kubesource.NewClientForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	src, err := kubesource.New(kubesource.Config{Client: client, Logger: log, Registerer: reg, Options: o.Source, Namespaces: o.Namespaces})
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
	cpc := controlplane.Config{
		GRPCListener: gl, AdminListener: al, Sources: append([]registry.Source{src}, o.Sources...),
		Debounce: 20 * time.Millisecond, Logger: log, Registerer: reg, Gatherer: reg, SettingsParts: o.SettingsParts,
		Authenticator: o.Authenticator,
	}
	ac := agent.Config{
		DNSAddrs: []string{"127.0.0.1:0"}, AdminAddr: "-", Upstreams: []string{upstream},
		Namespace: podNS, PodName: "client-0", ControlPlanes: []string{gl.Addr().String()},
		TTL: o.TTL, CacheSize: -1, ForwardPods: o.ForwardPods, IgnorePodZone: o.IgnorePodZone, Logger: log,
	}
	dir := t.TempDir()
	if o.Token != "" {
		ca := certtest.NewCA(t, "meshdns-test")
		ac.CACert = certtest.Write(t, dir, "ca.crt", ca.PEM)
		certPEM, keyPEM := ca.Issue(t, "controlplane", true)
		cpc.TLSCert, cpc.TLSKey = certtest.WritePair(t, dir, certPEM, keyPEM)
		ac.TokenFile = filepath.Join(dir, "token")
		if err := os.WriteFile(ac.TokenFile, []byte(o.Token), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	cp, err := controlplane.New(cpc)
	if err != nil {
		t.Fatal(err)
	}
	ac.ResolvConf = filepath.Join(dir, "resolv.conf")
	if err := os.WriteFile(ac.ResolvConf, []byte("nameserver 127.0.0.1\nsearch "+strings.Join(SearchList(podNS), " ")+"\noptions ndots:5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(ac)
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
