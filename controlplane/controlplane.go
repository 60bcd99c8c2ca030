// Package controlplane wires the control plane together: sources feed the
// registry, the registry's versions become per-namespace views, and the
// gRPC server streams them to agents; an admin HTTP server shows it all.
package controlplane

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/meshdns/meshdns/controlplane/admin"
	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/filesource"
	"github.com/meshdns/meshdns/controlplane/podmeta"
	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/controlplane/selfcert"
	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/controlplane/view"
	"github.com/meshdns/meshdns/controlplane/vip"
	"github.com/meshdns/meshdns/controlplane/webhook"
	"github.com/meshdns/meshdns/internal/certfile"
	"github.com/meshdns/meshdns/internal/loopback"
)

// DefaultVIPCIDRs are the virtual IP pools when none are configured: a
// reserved IPv4 range (240/4, never routed) and a ULA IPv6 /48.
var DefaultVIPCIDRs = []netip.Prefix{
	netip.MustParsePrefix("240.240.0.0/16"),
	netip.MustParsePrefix("fd00:240:240::/48"),
}

// Config configures the control plane. Every zero value has a default.
type Config struct {
	// GRPCAddr serves NameDiscoveryService; zero means ":15010".
	GRPCAddr string
	// AdminAddr serves /metrics, /healthz and /debug; zero means
	// "127.0.0.1:15014". It must be a loopback address: /debug shows every
	// agent's pod and peer address and every namespace's table, and
	// changes the log level (kubectl port-forward reaches it). "localhost"
	// listens on 127.0.0.1, never where /etc/hosts points it.
	AdminAddr string
	// ProbeAddr, when set, serves only /metrics and /healthz/* (any
	// address: the pod network, for the kubelet and Prometheus); zero
	// turns it off.
	ProbeAddr string
	// GRPCListener, AdminListener and ProbeListener, when set, are used
	// instead of listening on the addresses (tests pass 127.0.0.1:0
	// listeners).
	GRPCListener, AdminListener, ProbeListener net.Listener
	// ClusterDomain is the cluster's DNS domain; zero means "cluster.local".
	ClusterDomain string
	// Entries are YAML files or folders for the file source; none turns
	// the file source off.
	Entries []string
	// StateDir, when set, keeps the last good version of every entries
	// file across restarts; "" keeps nothing (see filesource.Config).
	StateDir string
	// VIPCIDRs are the virtual IP pools; nil means DefaultVIPCIDRs.
	VIPCIDRs []netip.Prefix
	// TLSCert and TLSKey turn on TLS for gRPC; ClientCA additionally
	// requires agents to present a certificate it signed. The files are
	// re-read when they change.
	TLSCert, TLSKey, ClientCA string
	// GRPCSelfTLS serves gRPC over TLS with the self-managed certificate
	// of WebhookCerts (whose CA the webhook hands to injected agents)
	// when TLSCert is not set.
	GRPCSelfTLS bool
	// Authenticator verifies agents (package auth): the namespace and pod
	// of a stream come from the identity it returns. Nil takes the agents'
	// claims as they are (auth.Insecure); cmd/meshdns sets it from the
	// Kubernetes source (TokenReview), --client-ca (SPIFFE) and
	// --insecure-allow-unauthenticated.
	Authenticator auth.Authenticator
	// Debounce folds bursts of source updates into one version; zero
	// means 100ms.
	Debounce time.Duration
	// MaxAdmissions bounds the agent streams being served their first
	// response at once (server.Config.MaxAdmissions); zero means 128.
	MaxAdmissions int
	// MaxConnectionsPerPeer bounds the gRPC connections of one IP address
	// (server.Config.MaxConnectionsPerPeer); zero means 256.
	MaxConnectionsPerPeer int
	// QuarantineMinAgents and QuarantineFraction say how many agents of a
	// view must report crashing on its table for the table to be
	// quarantined (server.Config); zero means 3 and 0.01.
	QuarantineMinAgents int
	QuarantineFraction  float64
	// CanaryTimeout is how long a canary that left without applying a
	// new version holds it back from the other agents
	// (server.Config.CanaryTimeout); zero means 30s.
	CanaryTimeout time.Duration
	// GRPCAgentStream serves the agents' stream on grpc-go rather than
	// agentstream's own server (server.Config.GRPCAgentStream).
	GRPCAgentStream bool
	// Sources are further sources (Kubernetes) run beside the file source.
	Sources []registry.Source
	// SettingsParts fill each agent's settings (package agentsettings:
	// DNS policy, the pod's zone, telemetry), in order; none means every
	// agent's settings are empty. They are composed per agent stream, from
	// the parts' caches. Run runs the parts that implement
	// agentsettings.Runner (their informers); streams wait for those that
	// implement agentsettings.Readier.
	SettingsParts []agentsettings.Part
	// Pods is the pod cache that settings parts and sources share
	// (forwarding rules, DNS policies: package podmeta) and that tells the
	// gRPC server of deleted pods, whose agents' streams it ends
	// (server.Config.Pods); Run runs it. Nil when nothing needs pods.
	Pods *podmeta.Pods
	// ExpectSources are source names that must report before the first
	// version is served. The file source, and every source of Sources
	// with a Name() string method, are added: no agent ever gets a table
	// missing a configured source.
	ExpectSources []string
	// Webhook, when set, is served over HTTPS on WebhookAddr (zero means
	// ":15017") with WebhookCert and WebhookKey, re-read when they change,
	// or else with the certificates of WebhookCerts.
	Webhook                              http.Handler
	WebhookAddr, WebhookCert, WebhookKey string
	// WebhookCerts manages the webhook's certificate itself (selfcert);
	// it runs beside the control plane.
	WebhookCerts *selfcert.Manager
	// WebhookListener, when set, is used instead of WebhookAddr.
	WebhookListener net.Listener
	// DrainTimeout bounds the drain after Run's context ends: the control
	// plane reports not ready at once but keeps serving (webhook, agents)
	// until Drained returns or DrainTimeout passes, so the API server and
	// the agents move to other replicas before this one stops answering.
	// Zero means stop at once.
	DrainTimeout time.Duration
	// Drained, when set, blocks until this replica is out of the load
	// balancing (its endpoints no longer ready) or ctx ends; nil waits for
	// DrainTimeout.
	Drained func(ctx context.Context) error
	// Logger; nil discards. Level, when set, is changeable at runtime
	// through the admin endpoint /debug/loglevel.
	Logger *slog.Logger
	Level  *slog.LevelVar
	// Registerer and Gatherer for the metrics, both or neither; nil means
	// a private registry with the Go and process collectors.
	Registerer prometheus.Registerer
	Gatherer   prometheus.Gatherer
}

// ControlPlane is the running control plane.
type ControlPlane struct {
	cfg      Config
	log      *slog.Logger
	registry *registry.Registry
	views    *view.Store
	server   *server.Server
	admin    http.Handler
	probes   http.Handler
	sources  []registry.Source
	settings *agentsettings.Settings
	grpcTLS  *tls.Config
	draining atomic.Bool // set when Run's context ended; readiness fails
}

// New validates cfg and builds the components. Certificate files are read
// here so a bad one fails at start, not at the first agent.
func New(cfg Config) (*ControlPlane, error) {
	if cfg.GRPCAddr == "" {
		cfg.GRPCAddr = ":15010"
	}
	if cfg.AdminAddr == "" {
		cfg.AdminAddr = "127.0.0.1:15014"
	}
	if cfg.AdminListener == nil {
		// "localhost" becomes 127.0.0.1 here, never looked up in
		// /etc/hosts, which could point it at the network.
		addr, err := loopback.ListenAddr(cfg.AdminAddr)
		if err != nil {
			return nil, fmt.Errorf("controlplane: admin address: %w", err)
		}
		cfg.AdminAddr = addr
	}
	if cfg.WebhookAddr == "" {
		cfg.WebhookAddr = ":15017"
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = "cluster.local"
	}
	if cfg.VIPCIDRs == nil {
		cfg.VIPCIDRs = DefaultVIPCIDRs
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if (cfg.Registerer == nil) != (cfg.Gatherer == nil) {
		return nil, errors.New("controlplane: set both Registerer and Gatherer, or neither")
	}
	if cfg.Registerer == nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		cfg.Registerer, cfg.Gatherer = reg, reg
	}
	c := &ControlPlane{cfg: cfg, log: log}
	expect := append([]string(nil), cfg.ExpectSources...)
	if len(cfg.Entries) > 0 {
		alloc, err := vip.New(cfg.VIPCIDRs)
		if err != nil {
			return nil, err
		}
		fs, err := filesource.New(filesource.Config{
			Paths: cfg.Entries, VIP: alloc, StateDir: cfg.StateDir, Logger: log.With("component", "filesource"), Registerer: cfg.Registerer,
		})
		if err != nil {
			return nil, err
		}
		c.sources = append(c.sources, fs)
		expect = append(expect, fs.Name())
	}
	c.sources = append(c.sources, cfg.Sources...)
	for _, s := range cfg.Sources {
		if n, ok := s.(interface{ Name() string }); ok && !slices.Contains(expect, n.Name()) {
			expect = append(expect, n.Name())
		}
	}
	if len(c.sources) == 0 {
		return nil, errors.New("controlplane: no sources (give --entries or a Kubernetes source)")
	}
	var err error
	if c.registry, err = registry.New(registry.Config{
		Debounce: cfg.Debounce, Expect: expect, Logger: log.With("component", "registry"), Registerer: cfg.Registerer,
	}); err != nil {
		return nil, err
	}
	if c.views, err = view.New(view.Config{
		ClusterDomain: cfg.ClusterDomain, Logger: log.With("component", "views"), Registerer: cfg.Registerer,
	}); err != nil {
		return nil, err
	}
	if cfg.TLSCert != "" || cfg.TLSKey != "" || cfg.ClientCA != "" {
		rl, err := certfile.New(certfile.Config{CertFile: cfg.TLSCert, KeyFile: cfg.TLSKey, CAFile: cfg.ClientCA,
			Logger: log.With("component", "grpc-tls")})
		if err != nil {
			return nil, fmt.Errorf("grpc tls: %w", err)
		}
		if c.grpcTLS, err = rl.ServerConfig(); err != nil {
			return nil, fmt.Errorf("grpc tls: %w", err)
		}
	}
	if cfg.GRPCSelfTLS && c.grpcTLS == nil {
		if cfg.WebhookCerts == nil {
			return nil, errors.New("controlplane: GRPCSelfTLS needs WebhookCerts (--webhook-secret)")
		}
		c.grpcTLS = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: cfg.WebhookCerts.GetCertificate}
	}
	c.settings = agentsettings.Compose(cfg.SettingsParts...)
	scfg := server.Config{
		Views: c.views, TLS: c.grpcTLS, MaxAdmissions: cfg.MaxAdmissions, MaxConnectionsPerPeer: cfg.MaxConnectionsPerPeer,
		Authenticator: cfg.Authenticator, ClusterDomain: cfg.ClusterDomain, Settings: c.settings,
		QuarantineMinAgents: cfg.QuarantineMinAgents, QuarantineFraction: cfg.QuarantineFraction, CanaryTimeout: cfg.CanaryTimeout,
		GRPCAgentStream: cfg.GRPCAgentStream, Logger: log.With("component", "grpc"), Registerer: cfg.Registerer,
	}
	if cfg.Pods != nil {
		scfg.Pods = cfg.Pods // not a nil *podmeta.Pods in the interface
	}
	if c.server, err = server.New(scfg); err != nil {
		return nil, err
	}
	acfg := admin.Config{Gatherer: cfg.Gatherer, Agents: c.server, Views: c.views, Ready: c.Ready, Level: cfg.Level,
		Logger: log.With("component", "admin")}
	if c.admin, err = admin.New(acfg); err != nil {
		return nil, err
	}
	if c.probes, err = admin.NewProbes(acfg); err != nil {
		return nil, err
	}
	return c, nil
}

// Ready reports whether the first version is built, which is once every
// source has reported (each entries path has a good version).
func (c *ControlPlane) Ready() bool {
	if c.draining.Load() {
		return false
	}
	select {
	case <-c.views.Ready():
		return true
	default:
		return false
	}
}

// Registry returns the registry, the Sink of every source.
func (c *ControlPlane) Registry() *registry.Registry { return c.registry }

// Run serves until ctx ends or a component fails; it then stops the rest
// and returns the first error.
func (c *ControlPlane) Run(parent context.Context) error {
	ctx, cancel := context.WithCancel(context.WithoutCancel(parent))
	defer cancel()
	go c.drain(parent, ctx, cancel)
	var g group
	g.run(ctx, cancel, "registry", c.registry.Run)
	g.run(ctx, cancel, "views", func(ctx context.Context) error { return c.views.Run(ctx, c.registry) })
	for _, s := range c.sources {
		g.run(ctx, cancel, "source", func(ctx context.Context) error { return s.Run(ctx, c.registry) })
	}
	for _, r := range c.settings.Runners() {
		g.run(ctx, cancel, "settings", r.Run)
	}
	if c.cfg.Pods != nil {
		g.run(ctx, cancel, "pods", c.cfg.Pods.Run)
	}
	g.run(ctx, cancel, "grpc", func(ctx context.Context) error {
		if c.cfg.GRPCListener != nil {
			return c.server.Serve(ctx, c.cfg.GRPCListener)
		}
		return c.server.Run(ctx, c.cfg.GRPCAddr)
	})
	g.run(ctx, cancel, "admin", func(ctx context.Context) error {
		return serveHTTP(ctx, &http.Server{Handler: c.admin, ReadHeaderTimeout: 10 * time.Second}, c.cfg.AdminAddr, c.cfg.AdminListener, false)
	})
	if c.cfg.ProbeAddr != "" || c.cfg.ProbeListener != nil {
		g.run(ctx, cancel, "probes", func(ctx context.Context) error {
			return serveHTTP(ctx, &http.Server{Handler: c.probes, ReadHeaderTimeout: 5 * time.Second}, c.cfg.ProbeAddr, c.cfg.ProbeListener, false)
		})
	}
	if c.cfg.Webhook != nil {
		tlsConf, err := c.webhookTLS()
		if err != nil {
			cancel()
			g.wait()
			return fmt.Errorf("webhook tls: %w", err)
		}
		if m := c.cfg.WebhookCerts; m != nil {
			g.run(ctx, cancel, "webhook-certs", m.Run)
		}
		g.run(ctx, cancel, "webhook", func(ctx context.Context) error {
			// Bounded connections and timeouts: the port is reachable
			// by more than the API server.
			lis := c.cfg.WebhookListener
			if lis == nil {
				var err error
				if lis, err = net.Listen("tcp", c.cfg.WebhookAddr); err != nil {
					return fmt.Errorf("listen %s: %w", c.cfg.WebhookAddr, err)
				}
			}
			lis = webhook.LimitListener(lis, webhook.MaxConnections)
			return serveHTTP(ctx, webhook.NewServer(c.cfg.Webhook, tlsConf, c.log.With("component", "webhook-server")), c.cfg.WebhookAddr, lis, true)
		})
	}
	c.log.Info("control plane started", "grpc", c.cfg.GRPCAddr, "admin", c.cfg.AdminAddr, "probes", c.cfg.ProbeAddr, "tls", c.grpcTLS != nil,
		"entries", c.cfg.Entries, "cluster_domain", c.cfg.ClusterDomain)
	return g.wait()
}

// drain waits for parent to end, then reports not ready and keeps
// serving until the replica is out of the endpoints (Drained) or
// DrainTimeout passes, then stops everything (cancel). A component that
// fails ends ctx first, and the drain with it.
func (c *ControlPlane) drain(parent, ctx context.Context, cancel context.CancelFunc) {
	select {
	case <-ctx.Done():
		return
	case <-parent.Done():
	}
	defer cancel()
	c.draining.Store(true)
	if c.cfg.DrainTimeout <= 0 {
		return
	}
	c.log.Info("draining: not ready, serving until out of the endpoints", "timeout", c.cfg.DrainTimeout)
	dctx, dcancel := context.WithTimeout(ctx, c.cfg.DrainTimeout)
	defer dcancel()
	if c.cfg.Drained == nil {
		<-dctx.Done()
		return
	}
	if err := c.cfg.Drained(dctx); err != nil && dctx.Err() == nil {
		c.log.Warn("drain: cannot tell when out of the endpoints; waited", "err", err)
		<-dctx.Done()
	}
}

// webhookTLS is the webhook's TLS configuration: from the certificate
// files, re-read when they change, or from the self-managed certificates.
func (c *ControlPlane) webhookTLS() (*tls.Config, error) {
	if m := c.cfg.WebhookCerts; m != nil && c.cfg.WebhookCert == "" {
		return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: m.GetCertificate}, nil
	}
	rl, err := certfile.New(certfile.Config{CertFile: c.cfg.WebhookCert, KeyFile: c.cfg.WebhookKey, Logger: c.log.With("component", "webhook-tls")})
	if err != nil {
		return nil, err
	}
	return rl.ServerConfig()
}

// serveHTTP serves until ctx ends, then shuts down gracefully.
func serveHTTP(ctx context.Context, srv *http.Server, addr string, lis net.Listener, useTLS bool) error {
	if lis == nil {
		var err error
		if lis, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("listen %s: %w", addr, err)
		}
	}
	errc := make(chan error, 1)
	go func() {
		if useTLS {
			errc <- srv.ServeTLS(lis, "", "")
		} else {
			errc <- srv.Serve(lis)
		}
	}()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := srv.Shutdown(sctx)
	<-errc
	return err
}

// group runs goroutines and keeps the first error; any error cancels the
// rest (a control plane missing a part must not look healthy).
type group struct {
	wg   sync.WaitGroup
	mu   sync.Mutex
	errs error
}

func (g *group) run(ctx context.Context, cancel context.CancelFunc, name string, f func(context.Context) error) {
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		if err := f(ctx); err != nil && ctx.Err() == nil {
			g.mu.Lock()
			if g.errs == nil {
				g.errs = fmt.Errorf("%s: %w", name, err)
			}
			g.mu.Unlock()
			cancel()
		}
	}()
}

func (g *group) wait() error {
	g.wg.Wait()
	return g.errs
}
