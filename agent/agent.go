// Package agent is the per-pod DNS agent: it keeps the pod's name table
// current (from a static file or the control plane stream), serves DNS from
// it with pkg/proxy, forwards the rest upstream with pkg/proxy/upstream,
// and serves the admin HTTP endpoints.
//
// A version takes one path: its source (the stream, the state directory or
// the file) hands it to agent/ingest, which converts its settings
// (convertSettings), makes its table and publishes both as one served
// value, once; serve swaps that into the DNS server and the resolver.
// The agent's pieces are one list of parts (parts.go) that Listen opens,
// Run runs and Close unwinds.
package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshdns/meshdns/agent/discovery"
	"github.com/meshdns/meshdns/agent/ingest"
	"github.com/meshdns/meshdns/pkg/proxy"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// Agent is one running agent. Create it with New; Listen opens the sockets
// (optional: Run does it), Run serves until its context ends.
type Agent struct {
	cfg Config
	log *slog.Logger
	m   *metrics
	aux auxiliary // made by New, read-only after it
	// parts are the agent's pieces in start order (parts.go).
	parts     []part
	qlSources queryLogSources // the query log's sources (querylogsources.go)
	ready     atomic.Bool
	restoring atomic.Bool  // while Restore replays the persisted table
	failing   failingState // the failing-names report (failing.go)

	mu  sync.Mutex // guards run while Listen and Close change it
	run running
}

// auxiliary are the optional helpers New makes from the Config.
type auxiliary struct {
	dnsDefault bool // DNSAddrs was not given: an IPv6 twin may be added
	mem        *ingest.Releaser
	rules      *rulesCheck      // or nil when the iptables rules are not checked
	tap        *dnstapTap       // or nil without --dnstap
	ann        *annotationWatch // or nil without --pod-annotations
	// levelFloor is the log level the agent started with, the quietest
	// /debug/loglevel may set; nil without Config.LogLevel.
	levelFloor *slog.Level
	lookups    lookupLimit // bounds /debug/lookup
}

// running is what Listen opened. It is set once under Agent.mu, then
// read by Run and the handlers without it.
type running struct {
	listened bool
	opened   []part // the parts Listen opened, in order
	resolv   resolvInputs
	resolver *upstream.Resolver
	server   *proxy.Server
	tables   *ingest.Ingest[settings]
	disc     *discovery.Client // or nil without control plane
	file     *fileSource       // or nil without table file
	adminLis net.Listener      // or nil when the admin server is off
	probeLis net.Listener      // or nil without ProbeAddr
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
	a := &Agent{cfg: cfg, log: cfg.Logger, m: m}
	a.qlSources.flags = cfg.QueryLog
	if a.aux, err = newAuxiliary(cfg, a, dnsDefault); err != nil {
		return nil, err
	}
	a.parts = a.partList()
	return a, nil
}

// newAuxiliary makes the helpers cfg asks for; the annotation watch
// reports to a.
func newAuxiliary(cfg Config, a *Agent, dnsDefault bool) (auxiliary, error) {
	x := auxiliary{dnsDefault: dnsDefault, mem: ingest.NewReleaser(time.Second, 10*time.Second),
		lookups: make(lookupLimit, maxDebugLookups)}
	var err error
	if cfg.IPTablesCheckInterval > 0 {
		if x.rules, err = newRulesCheck(cfg); err != nil {
			return x, err
		}
	}
	if cfg.LogLevel != nil {
		l := cfg.LogLevel.Level()
		x.levelFloor = &l
	}
	if cfg.PodAnnotations != "" {
		x.ann = &annotationWatch{path: cfg.PodAnnotations, interval: cfg.FilePollInterval, a: a}
	}
	if cfg.Dnstap != "" {
		if x.tap, err = newDnstapTap(cfg); err != nil {
			return x, fmt.Errorf("agent config: %w", err)
		}
		if err := registerDnstap(cfg.Registry, x.tap.w); err != nil {
			return x, err
		}
	}
	return x, nil
}

// Listen reads the resolv.conf files, builds the resolver, the DNS server
// and the table source, and opens the DNS and admin sockets, so that a
// taken port fails before Run and tests can use port 0: it opens the
// parts in order, and on a failure closes those it opened. It may be
// called once; Run calls it when it was not.
func (a *Agent) Listen() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.run.listened {
		return errors.New("agent: Listen called twice")
	}
	a.run.listened = true
	opened, err := openParts(a.parts)
	a.run.opened = opened
	return err
}

// Close releases what Listen opened, the parts in reverse order, when Run
// will not be called (Run releases everything itself). It is idempotent.
func (a *Agent) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	err := closeParts(a.run.opened)
	a.run.opened = nil
	return err
}

// DNSAddr returns the first bound UDP address, or nil before Listen.
func (a *Agent) DNSAddr() net.Addr {
	a.mu.Lock()
	s := a.run.server
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
func (a *Agent) AdminAddr() net.Addr { return a.listenerAddr(&a.run.adminLis) }

// ProbeAddr returns the bound probe address, or nil.
func (a *Agent) ProbeAddr() net.Addr { return a.listenerAddr(&a.run.probeLis) }

func (a *Agent) listenerAddr(l *net.Listener) net.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	if *l == nil {
		return nil
	}
	return (*l).Addr()
}

// apply hands v, from source, to ingest, which converts its settings,
// makes its table and, when both are good, publishes them to serve; on
// error the last good version keeps serving and the error says why.
func (a *Agent) apply(source string, v ingest.Version) error {
	return a.run.tables.Apply(source, v)
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
func (a *Agent) Run(ctx context.Context) (err error) {
	a.mu.Lock()
	listened := a.run.listened
	a.mu.Unlock()
	if !listened {
		if err := a.Listen(); err != nil {
			return err
		}
	}
	defer func() { err = errors.Join(err, a.Close()) }()
	a.log.Info("agent starting",
		"dns", a.cfg.DNSAddrs, "admin", a.cfg.AdminAddr, "upstreams", a.run.resolv.Upstreams,
		"upstreams_from", a.run.resolv.From, "search", a.run.resolv.Search, "namespace", a.cfg.Namespace)
	return runParts(ctx, a.parts)
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
	case <-a.run.disc.Synced():
		a.setReady("control plane stream delivered a table")
	case <-grace:
		a.setReady("restored table served for the ready grace period")
	}
	return nil
}
