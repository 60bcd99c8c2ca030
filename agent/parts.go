package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/meshdns/meshdns/agent/ingest"
	"github.com/meshdns/meshdns/internal/proxymetrics"
	"github.com/meshdns/meshdns/pkg/nametable"
	"github.com/meshdns/meshdns/pkg/proxy"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// part is one piece of the agent. The agent's parts are one list in start
// order (partList): Listen opens them in order, Run primes and runs them
// in order, and when an open fails, Close is called or Run ends, the parts
// opened close in reverse order. Any step may be nil: nothing to do then.
type part struct {
	name string
	// open acquires the part (a socket, a client) in Listen.
	open func() error
	// prime runs in Run before the parts after it start: what must be in
	// place before them (the first table, before the DNS server answers).
	// An error stops the agent.
	prime func() error
	// run serves, on a goroutine of its own, until ctx ends; an error
	// stops the agent.
	run func(ctx context.Context) error
	// close releases what open acquired; it may follow run's end.
	close func() error
}

// openParts opens ps in order and returns those it opened; when one
// fails, it closes those again in reverse order and returns none.
func openParts(ps []part) (opened []part, err error) {
	defer func() {
		if err != nil {
			err = errors.Join(err, closeParts(opened))
			opened = nil
		}
	}()
	for _, p := range ps {
		if p.open != nil {
			if err := p.open(); err != nil {
				return opened, err
			}
		}
		opened = append(opened, p)
	}
	return opened, nil
}

// closeParts closes ps in reverse order.
func closeParts(ps []part) error {
	var errs []error
	for i := len(ps) - 1; i >= 0; i-- {
		if c := ps[i].close; c != nil {
			errs = append(errs, c())
		}
	}
	return errors.Join(errs...)
}

// runParts primes and starts ps in order and waits for every one to
// stop: the first part to fail ends ctx for the others, and its error is
// returned once all have stopped.
func runParts(ctx context.Context, ps []part) error {
	g, ctx := errgroup.WithContext(ctx)
	for _, p := range ps {
		if p.prime != nil {
			if err := p.prime(); err != nil {
				g.Go(func() error { return err }) // ends ctx for those started
				return g.Wait()
			}
		}
		if p.run != nil {
			g.Go(func() error {
				if err := p.run(ctx); err != nil {
					return fmt.Errorf("%s: %w", p.name, err)
				}
				return nil
			})
		}
	}
	return g.Wait()
}

// partList is the agent's parts in start order: the upstreams and the DNS
// server, ingest, the helpers, the table source (its first table in
// before the DNS server answers), then the sockets that serve.
func (a *Agent) partList() []part {
	ps := []part{
		{name: "resolv.conf", open: a.openResolv},
		{name: "resolver", open: a.openResolver, close: func() error { return a.run.resolver.Close() }},
		{name: "dns server", open: a.openServer},
		{name: "ingest", open: a.openIngest},
	}
	ps = append(ps, a.sourceParts()...)
	ps = append(ps, part{name: "dns", open: a.listenDNS, run: func(ctx context.Context) error { return a.run.server.Run(ctx) },
		close: func() error { return a.run.server.Close() }})
	if a.cfg.AdminAddr != "-" {
		ps = append(ps, httpPart("admin", a.cfg.AdminAddr, &a.run.adminLis, a.adminHandler, 10*time.Second))
	}
	if a.cfg.ProbeAddr != "" {
		ps = append(ps, httpPart("probes", a.cfg.ProbeAddr, &a.run.probeLis, a.probeHandler, 5*time.Second))
	}
	return ps
}

// auxParts are the helpers that run beside the DNS server.
func (a *Agent) auxParts() []part {
	ps := []part{{name: "memory", run: a.aux.mem.Run}}
	if a.aux.tap != nil {
		ps = append(ps, part{name: "dnstap", run: a.aux.tap.w.Run})
	}
	if a.aux.ann != nil {
		ps = append(ps, part{name: "pod annotations", run: a.aux.ann.Run})
	}
	if a.aux.rules != nil {
		ps = append(ps, part{name: "iptables check", run: a.aux.rules.Run})
	}
	return ps
}

// openResolv reads the resolv.conf files and settles the DNS addresses.
func (a *Agent) openResolv() error {
	in, err := readResolvInputs(a.cfg)
	if err != nil {
		return err
	}
	a.run.resolv = in
	if a.aux.dnsDefault {
		a.cfg.DNSAddrs = withV6Listener(a.cfg.DNSAddrs, in.Upstreams, ipv6Loopback())
	}
	return nil
}

// openResolver builds the resolver of the upstreams.
func (a *Agent) openResolver() error {
	cfg, in := a.cfg, a.run.resolv
	tlsCfg, err := upstreamTLS(cfg.UpstreamCA)
	if err != nil {
		return err
	}
	a.run.resolver, err = upstream.New(upstream.Config{
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
	return err
}

// openServer builds the DNS server (its sockets open in listenDNS).
func (a *Agent) openServer() error {
	cfg, in := a.cfg, a.run.resolv
	var tap proxy.Tap
	if a.aux.tap != nil {
		tap = a.aux.tap
	}
	if a.aux.ann != nil {
		// Before the server, so its first query log is the pod's.
		a.aux.ann.reload()
	}
	var err error
	a.run.server, err = proxy.New(proxy.Config{
		Addrs:         cfg.DNSAddrs,
		Resolver:      a.run.resolver,
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
		return err
	}
	a.qlSources.update(func(s *queryLogSources) { s.set = a.run.server.SetQueryLog })
	return nil
}

// openIngest builds the room every version passes through: it converts
// the version's settings, makes its table and publishes the served value
// to serve; the tables between two versions go straight to the server,
// under the settings in force.
func (a *Agent) openIngest() error {
	cfg := a.cfg
	var err error
	a.run.tables, err = ingest.New(ingest.Config[settings]{
		Pod: nametable.Context{
			Namespace:     cfg.Namespace,
			ClusterDomain: cfg.ClusterDomain,
			Search:        a.run.resolv.Search,
			TTL:           cfg.TTL,
			ForwardPods:   cfg.ForwardPods,
		},
		IgnorePodZone: cfg.IgnorePodZone,
		Limits:        cfg.Limits,
		Settings:      convertSettings,
		Publish:       a.serve,
		Swap:          func(t *nametable.Table) { a.run.server.SetTable(t) }, // keeps the policy in force
		Built:         a.aux.mem.Kick,
		Logger:        a.log,
		Registry:      cfg.Registry,
		Now:           cfg.Now,
	})
	return err
}

// listenDNS opens the DNS sockets.
func (a *Agent) listenDNS() error {
	if err := a.run.server.Listen(); err != nil {
		return fmt.Errorf("dns: %w", err)
	}
	return nil
}

// httpPart is an HTTP server of handler on addr: its listener, kept in
// *lis, opens in Listen; it serves until ctx ends, then shuts down within
// 2s.
func httpPart(name, addr string, lis *net.Listener, handler func() http.Handler, headerTimeout time.Duration) part {
	var srv *http.Server
	return part{
		name: name,
		open: func() error {
			l, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			*lis = l
			srv = &http.Server{Handler: handler(), ReadHeaderTimeout: headerTimeout}
			return nil
		},
		run: func(ctx context.Context) error {
			stop := context.AfterFunc(ctx, func() {
				sctx, c := context.WithTimeout(context.Background(), 2*time.Second)
				defer c()
				srv.Shutdown(sctx)
			})
			defer stop()
			if err := srv.Serve(*lis); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
		close: func() error {
			if err := (*lis).Close(); err != nil && !errors.Is(err, net.ErrClosed) {
				return err
			}
			return nil
		},
	}
}
