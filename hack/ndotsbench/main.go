// Command ndotsbench measures what the ndots:5 search walk costs a pod, and
// what meshdns saves on it: for one outside name looked up by glibc's and
// musl's getaddrinfo in a pod, the queries that reach the cluster DNS and
// the time to the answer, without and with meshdns's agent in the pod.
// See README.md. It needs root: it creates two network namespaces, which
// it deletes with every process it started before it exits.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"
)

// config is one run's inputs, from the flags.
type config struct {
	count   int           // lookups per setup and client after the first
	delay   string        // the hop's delay each way
	coreDNS string        // CoreDNS binary
	meshdns string        // meshdns binary with the agent command
	table   string        // the agent's --nametable-file
	name    string        // the outside name looked up
	timeout time.Duration // bound of the whole run
}

func main() {
	home, _ := os.UserHomeDir()
	var cfg config
	flag.IntVar(&cfg.count, "n", 50, "lookups per setup and client, after the first (1..1000)")
	flag.StringVar(&cfg.delay, "delay", "1ms", "delay of the hop to the cluster DNS, each way (a relay holds each query and each answer this long)")
	flag.StringVar(&cfg.coreDNS, "coredns", filepath.Join(home, ".cache/meshdns/coredns/coredns"), "CoreDNS binary (make deps builds it)")
	flag.StringVar(&cfg.meshdns, "meshdns", "bin/meshdns-agent", "meshdns binary with the agent command (make build)")
	flag.StringVar(&cfg.table, "table", "examples/nametable.json", "the agent's name table (authoritative for cluster.local)")
	flag.StringVar(&cfg.name, "name", "www.example.com", "the outside name (answered by the cluster DNS's example.com zone)")
	flag.DurationVar(&cfg.timeout, "timeout", 3*time.Minute, "bound of the whole run")
	flag.Parse()
	if flag.Arg(0) == "relay" {
		if err := relayMain(flag.Args()[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "ndotsbench:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	rows, err := run(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ndotsbench:", err)
		os.Exit(1)
	}
	printTable(os.Stdout, cfg, rows)
}

func (cfg config) check() error {
	switch {
	case os.Geteuid() != 0:
		return errors.New("needs root: it creates network namespaces")
	case cfg.count < 1 || cfg.count > 1000:
		return fmt.Errorf("-n %d: want 1..1000", cfg.count)
	case cfg.timeout <= 0:
		return fmt.Errorf("-timeout %s: want > 0", cfg.timeout)
	}
	for _, f := range []string{cfg.coreDNS, cfg.meshdns, cfg.table} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("input: %w", err)
		}
	}
	return nil
}

// run sets up the namespaces and CoreDNS, measures every setup with every
// client, and tears everything down whatever happens.
func run(ctx context.Context, cfg config) (rows []row, err error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	meshdns, err := filepath.Abs(cfg.meshdns)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "ndotsbench")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	clients, err := buildClients(ctx, dir)
	if err != nil {
		return nil, err
	}
	tp := newTopology()
	defer func() {
		if terr := tp.tearDown(); terr != nil && err == nil {
			err = fmt.Errorf("tear down: %w", terr)
		}
	}()
	if err := tp.setUp(ctx); err != nil {
		return nil, fmt.Errorf("set up the namespaces: %w", err)
	}
	rl, err := startRelay(ctx, tp, cfg.delay)
	if err != nil {
		return nil, err
	}
	defer rl.stop()
	dns, err := startCoreDNS(tp, cfg.coreDNS, dir)
	if err != nil {
		return nil, err
	}
	defer dns.stop()
	m := &measurer{tp: tp, dns: dns, cfg: cfg}
	if err := m.waitServing(ctx); err != nil {
		return nil, err
	}
	for _, s := range setups {
		r, err := m.setup(ctx, s, clients, meshdns, dir)
		if err != nil && ctx.Err() != nil {
			// Interrupted or out of time: say so rather than how a
			// killed client ended.
			return nil, fmt.Errorf("%s: stopped (-timeout %s): %w", s.name, cfg.timeout, ctx.Err())
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		rows = append(rows, r...)
	}
	return rows, nil
}
