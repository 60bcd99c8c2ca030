// Package agent is the per-pod DNS agent: it keeps the pod's name table
// current (from a static file or the control plane stream), serves DNS from
// it with pkg/proxy, forwards the rest upstream with pkg/proxy/upstream,
// and serves the admin HTTP endpoints.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/meshdns/meshdns/agent/discovery"
	"github.com/meshdns/meshdns/agent/ingest"
	"github.com/meshdns/meshdns/internal/proxymetrics"
	"github.com/meshdns/meshdns/pkg/nametable"
	"github.com/meshdns/meshdns/pkg/proxy"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// Agent is one running agent. Create it with New; Listen opens the sockets
// (optional: Run does it), Run serves until its context ends.
type Agent struct {
	cfg        Config
	dnsDefault bool // DNSAddrs was not given: an IPv6 twin may be added
	log        *slog.Logger
	m          *metrics

	mem   *ingest.Releaser
	rules *rulesCheck // or nil when the iptables rules are not checked
	tap   *dnstapTap  // or nil without --dnstap
	// qlSources composes the query log from flags, settings,
	// annotations and /debug/querylog; ann follows the annotations (nil
	// without --pod-annotations).
	qlSources   queryLogSources
	ann         *annotationWatch
	ready       atomic.Bool
	restoring   atomic.Bool // while Restore replays the persisted table
	lookupLimit lookupLimit // bounds /debug/lookup
	settings    settings    // the served version's settings, converted
	// levelFloor is the log level the agent started with, the quietest
	// /debug/loglevel may set; nil without Config.LogLevel.
	levelFloor *slog.Level

	mu       sync.Mutex // guards following, set once by Listen
	listened bool
	resolv   resolvInputs
	resolver *upstream.Resolver
	server   *proxy.Server
	tables   *ingest.Ingest
	disc     *discovery.Client // or nil without control plane
	file     *fileSource       // or nil without table file
	adminLis net.Listener      // or nil when the admin server is off
	admin    *http.Server
	probeLis net.Listener // or nil without ProbeAddr
	probe    *http.Server

	failing failingState // the failing-names report (failing.go)
}

// New checks cfg and registers the agent's metrics; it does no other I/O.
func New(cfg Config) (*Agent, error) {
	dnsDefault := len(cfg.DNSAddrs) == 0
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("agent config: %w", err)
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	a := &Agent{cfg: cfg, dnsDefault: dnsDefault, log: cfg.Logger, m: m, mem: ingest.NewReleaser(time.Second, 10*time.Second),
		lookupLimit: make(lookupLimit, maxDebugLookups)}
	if cfg.IPTablesCheckInterval > 0 {
		if a.rules, err = newRulesCheck(cfg); err != nil {
			return nil, err
		}
	}
	a.qlSources.flags = cfg.QueryLog
	if cfg.LogLevel != nil {
		l := cfg.LogLevel.Level()
		a.levelFloor = &l
	}
	if cfg.PodAnnotations != "" {
		a.ann = &annotationWatch{path: cfg.PodAnnotations, interval: cfg.FilePollInterval, a: a}
	}
	if cfg.Dnstap != "" {
		if a.tap, err = newDnstapTap(cfg); err != nil {
			return nil, fmt.Errorf("agent config: %w", err)
		}
		if err := registerDnstap(cfg.Registry, a.tap.w); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Listen reads the resolv.conf files, builds the resolver, the DNS server
// and the table source, and opens the DNS and admin sockets, so that a
// taken port fails before Run and tests can use port 0. It may be called
// once; Run calls it when it was not.
func (a *Agent) Listen() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.listened {
		return errors.New("agent: Listen called twice")
	}
	a.listened = true
	cfg := a.cfg
	in, err := readResolvInputs(cfg)
	if err != nil {
		return err
	}
	a.resolv = in
	if a.dnsDefault {
		cfg.DNSAddrs = withV6Listener(cfg.DNSAddrs, in.Upstreams, ipv6Loopback())
		a.cfg.DNSAddrs = cfg.DNSAddrs
	}
	tlsCfg, err := upstreamTLS(cfg.UpstreamCA)
	if err != nil {
		return err
	}
	a.resolver, err = upstream.New(upstream.Config{
		Upstreams: in.Upstreams,
		TLS:       tlsCfg,
		Timeout:   cfg.UpstreamTimeout,
		// The pod's resolver's patience: the forward answers within it.
		ClientTimeout:   in.ClientTimeout,
		Parallel:        cfg.ParallelUpstreams,
		CacheSize:       cfg.CacheSize,
		Prefetch:        cfg.Prefetch,
		PrefetchWindow:  cfg.PrefetchWindow,
		PrefetchPercent: cfg.PrefetchPercent,
		Now:             cfg.Now,
		Logger:          a.log,
		Registry:        proxymetrics.Registry(cfg.Registry),
	})
	if err != nil {
		return err
	}
	var tap proxy.Tap
	if a.tap != nil {
		tap = a.tap
	}
	if a.ann != nil {
		// Before the server, so its first query log is the pod's.
		a.ann.reload()
	}
	a.server, err = proxy.New(proxy.Config{
		Addrs:         cfg.DNSAddrs,
		Resolver:      a.resolver,
		ClusterDomain: cfg.ClusterDomain,
		Logger:        a.log,
		Registry:      proxymetrics.Registry(cfg.Registry),
		QueryLog:      a.qlSources.effective(),
		QueryLogger:   queryLogger(cfg),
		QueryTap:      tap,
		Takeover:      cfg.Takeover,
		Inherited:     cfg.Sockets,
		// On stop, hand the sockets' traffic to a successor (or let the
		// kernel refuse it) and answer every query taken, within the
		// pod's resolver timeout.
		DrainTimeout: in.ClientTimeout,
		// A policy judges search-path expansions as the name meant.
		Search: in.Search,
	})
	if err != nil {
		a.resolver.Close()
		return err
	}
	a.qlSources.update(func(s *queryLogSources) { s.set = a.server.SetQueryLog })
	a.tables, err = ingest.New(ingest.Config{
		Pod: nametable.Context{
			Namespace:     cfg.Namespace,
			ClusterDomain: cfg.ClusterDomain,
			Search:        in.Search,
			TTL:           cfg.TTL,
			ForwardPods:   cfg.ForwardPods,
		},
		IgnorePodZone: cfg.IgnorePodZone,
		Limits:        cfg.Limits,
		Publish:       a.publish,
		Built:         a.mem.Kick,
		Logger:        a.log,
		Registry:      cfg.Registry,
		Now:           cfg.Now,
	})
	if err != nil {
		a.resolver.Close()
		return err
	}
	switch {
	case cfg.NameTableFile != "":
		a.file = &fileSource{
			path:     cfg.NameTableFile,
			interval: cfg.FilePollInterval,
			apply: func(v ingest.Version) error {
				if err := a.apply(ingest.SourceFile, v); err != nil {
					return err
				}
				a.setReady("name table loaded")
				return nil
			},
			log: a.log,
		}
	case len(cfg.ControlPlanes) > 0:
		a.disc, err = discovery.New(discovery.Config{
			Addrs:         cfg.ControlPlanes,
			PodName:       cfg.PodName,
			Namespace:     cfg.Namespace,
			ClusterDomain: cfg.ClusterDomain,
			AgentVersion:  cfg.Version,
			InstanceID:    cfg.InstanceID,
			Features:      ingest.Features,
			Apply: func(v *discovery.Version) error {
				src := ingest.SourceControlPlane
				if a.restoring.Load() {
					src = ingest.SourceState
				}
				return a.apply(src, v)
			},
			StateDir:  cfg.StateDir,
			CACert:    cfg.CACert,
			TLSCert:   cfg.TLSCert,
			TLSKey:    cfg.TLSKey,
			TokenFile: cfg.TokenFile,
			Logger:    a.log,
			Registry:  cfg.Registry,
			Now:       cfg.Now,
		})
		if err != nil {
			a.resolver.Close()
			return err
		}
	}
	if err := a.server.Listen(); err != nil {
		a.resolver.Close()
		return fmt.Errorf("dns: %w", err)
	}
	if cfg.AdminAddr != "-" {
		lis, err := net.Listen("tcp", cfg.AdminAddr)
		if err != nil {
			a.server.Close()
			a.resolver.Close()
			return fmt.Errorf("admin: %w", err)
		}
		a.adminLis = lis
		a.admin = &http.Server{Handler: a.adminHandler(), ReadHeaderTimeout: 10 * time.Second}
	}
	if cfg.ProbeAddr != "" {
		lis, err := net.Listen("tcp", cfg.ProbeAddr)
		if err != nil {
			if a.adminLis != nil {
				a.adminLis.Close()
			}
			a.server.Close()
			a.resolver.Close()
			return fmt.Errorf("probes: %w", err)
		}
		a.probeLis = lis
		a.probe = &http.Server{Handler: a.probeHandler(), ReadHeaderTimeout: 5 * time.Second}
	}
	return nil
}

// Close releases what Listen opened when Run will not be called (Run
// releases everything itself). It is idempotent.
func (a *Agent) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	var errs []error
	if a.server != nil {
		errs = append(errs, a.server.Close())
	}
	if a.resolver != nil {
		errs = append(errs, a.resolver.Close())
	}
	for _, l := range []net.Listener{a.adminLis, a.probeLis} {
		if l == nil {
			continue
		}
		if err := l.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// DNSAddr returns the first bound UDP address, or nil before Listen.
func (a *Agent) DNSAddr() net.Addr {
	a.mu.Lock()
	s := a.server
	a.mu.Unlock()
	if s == nil {
		return nil
	}
	if addrs := s.UDPAddrs(); len(addrs) > 0 {
		return addrs[0]
	}
	return nil
}

// AdminAddr returns the bound admin address, or nil.
func (a *Agent) AdminAddr() net.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.adminLis == nil {
		return nil
	}
	return a.adminLis.Addr()
}

// ProbeAddr returns the bound probe address, or nil.
func (a *Agent) ProbeAddr() net.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.probeLis == nil {
		return nil
	}
	return a.probeLis.Addr()
}

// apply makes v, from source, the version served, with its settings;
// on error (a table or settings that are not valid) the last good version
// keeps serving and the error says why.
func (a *Agent) apply(source string, v ingest.Version) error {
	if err := a.checkSettings(v); err != nil {
		return fmt.Errorf("table %s from %s: %w", v.ID(), source, err)
	}
	return a.tables.Apply(source, v)
}

// Ready reports what /healthz/ready reports.
func (a *Agent) Ready() bool { return a.ready.Load() }

func (a *Agent) setReady(why string) {
	if !a.ready.Swap(true) {
		a.m.ready.Set(1)
		a.log.Info("agent ready", "reason", why)
	}
}

// Run serves until ctx ends, then shuts everything down and returns nil, or
// returns the first error that stopped a part of the agent.
func (a *Agent) Run(ctx context.Context) error {
	a.mu.Lock()
	listened := a.listened
	a.mu.Unlock()
	if !listened {
		if err := a.Listen(); err != nil {
			return err
		}
	}
	defer a.resolver.Close()
	a.log.Info("agent starting",
		"dns", a.cfg.DNSAddrs, "admin", a.cfg.AdminAddr, "upstreams", a.resolv.Upstreams,
		"upstreams_from", a.resolv.From, "search", a.resolv.Search, "namespace", a.cfg.Namespace)

	if a.file == nil && a.disc == nil {
		// No table source: a plain forwarder. An empty table answers only
		// dns-version and forwards the rest, and there is nothing to wait
		// for.
		if err := a.tables.Apply(ingest.SourceNone, nil); err != nil {
			return errors.Join(err, a.Close())
		}
		a.setReady("no table source")
	}

	// The first part to fail ends ctx for the others; Wait returns its
	// error once every part has stopped.
	g, ctx := errgroup.WithContext(ctx)
	run := func(name string, f func(context.Context) error) {
		g.Go(func() error {
			if err := f(ctx); err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			return nil
		})
	}

	run("memory", a.mem.Run)
	if a.tap != nil {
		run("dnstap", a.tap.w.Run)
	}
	if a.ann != nil {
		run("pod annotations", a.ann.Run)
	}
	if a.rules != nil {
		run("iptables check", a.rules.Run)
	}
	// The table source starts before the DNS server answers, so a valid
	// file or persisted table is in place for the first query.
	switch {
	case a.file != nil:
		// Each good table marks the agent ready (see the file source's
		// apply in Listen), this first load included.
		if err := a.file.load(); err != nil {
			a.file.lastErr = err.Error() // the watch's first check does not log it again
			a.log.Error("rejected name table file; serving without a table until a good one appears", "err", err)
		}
		run("name table file", a.file.Run)
	case a.disc != nil:
		a.restoring.Store(true)
		restored, err := a.disc.Restore()
		a.restoring.Store(false)
		if err != nil {
			a.log.Error("persisted name table not restored", "err", err)
		}
		run("control plane", a.disc.Run)
		run("readiness", func(ctx context.Context) error {
			return a.waitSynced(ctx, restored)
		})
	}

	run("dns", a.server.Run)
	serve := func(srv *http.Server, lis net.Listener) func(context.Context) error {
		return func(ctx context.Context) error {
			stop := context.AfterFunc(ctx, func() {
				sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
				defer c()
				srv.Shutdown(sctx)
			})
			defer stop()
			if err := srv.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		}
	}
	if a.admin != nil {
		run("admin", serve(a.admin, a.adminLis))
	}
	if a.probe != nil {
		run("probes", serve(a.probe, a.probeLis))
	}
	return g.Wait()
}

// waitSynced marks the agent ready when the stream delivered a table, or,
// when a persisted table serves already, after the grace period: a control
// plane outage must not take every restarted pod out of its Service when
// each of them has a good table to answer from.
func (a *Agent) waitSynced(ctx context.Context, restored bool) error {
	var grace <-chan time.Time
	if restored {
		t := time.NewTimer(a.cfg.ReadyGrace)
		defer t.Stop()
		grace = t.C
	}
	select {
	case <-ctx.Done():
	case <-a.disc.Synced():
		a.setReady("control plane stream delivered a table")
	case <-grace:
		a.setReady("restored table served for the ready grace period")
	}
	return nil
}
