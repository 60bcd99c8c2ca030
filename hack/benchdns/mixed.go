package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
)

// The mixed latency run: every server at the same steady rate on one query
// file mixing the three ways a forwarder answers, one server at a time on
// the server core, the p50 and p99 of each, and each p99 over unbound's in
// the same round.

// target is one server of the mixed latency run.
type target struct {
	name string
	c    *child
}

// forwardedScenario asks names the upstream answers with TTL 0: no cache
// keeps them, so every query goes upstream.
func forwardedScenario() scenario {
	return scenario{name: "forwarded", lines: func(i int) string {
		return fmt.Sprintf("%s%d.example.net A", forwardedPrefix, i)
	}}
}

// mixedScenario is a third each of table answers, upstream cache hits and
// forwarded misses, interleaved.
func mixedScenario() scenario {
	scs, fwd := scenarios(), forwardedScenario()
	return scenario{name: "mixed", lines: func(i int) string {
		switch i % 3 {
		case 0:
			return scs[0].lines(i) // known
		case 1:
			return scs[3].lines(i) // cache-hit
		}
		return fwd.lines(i)
	}}
}

// latencyStats are one server's figures over the rounds.
type latencyStats struct {
	p50, p99, ratio, cpu []float64
	failed               int // runs that did not complete
	// all are the latencies of every round: a stall of the machine
	// hits one run, and with short runs in turn it lands on every
	// server alike in the pooled p99 over many rounds.
	all []float64
}

// mixedLatency measures every target for cfg.rounds rounds of one
// fixed-rate run (cfg.p99QPS, cfg.p99Duration) on file, the order rotated
// every round; the upstream and the measured server run at real-time
// priority with dnsperf (measureRT), so the other load of the machine
// does not set the tail. ref names the target whose p99 the others are
// divided by, round by round. It prints each run and returns the stats by
// target name.
func mixedLatency(cfg *runConfig, targets []target, ref string, up *child, file string) (map[string]*latencyStats, error) {
	if cfg.chrt != "" {
		pid := strconv.Itoa(up.cmd.Process.Pid)
		if out, err := exec.Command(cfg.chrt, "-a", "-f", "-p", "10", pid).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("chrt upstream: %v: %s", err, out)
		}
		defer exec.Command(cfg.chrt, "-a", "-o", "-p", "0", pid).Run()
	}
	stats := make(map[string]*latencyStats, len(targets))
	for _, t := range targets {
		stats[t.name] = &latencyStats{}
		if _, err := measure(cfg, t.c, file, cfg.duration, 0); err != nil { // warm up the caches
			return nil, fmt.Errorf("%s warm-up: %w", t.name, err)
		}
	}
	for round := 1; round <= cfg.rounds; round++ {
		p99 := make(map[string]float64, len(targets))
		for j := range targets {
			t := targets[(j+round)%len(targets)]
			s := stats[t.name]
			r, err := measureRT(cfg, t.c, file)
			if err != nil {
				// One run of a shared machine's bad moment (dnsperf
				// stuck, killed at its timeout) costs that round of
				// that server, not the whole run.
				s.failed++
				fmt.Printf("mixed %-22s round %d: failed: %.300v\n", t.name, round, err)
				continue
			}
			p99[t.name] = percentile(r.lats, 0.99)
			s.p50 = append(s.p50, percentile(r.lats, 0.5))
			s.p99 = append(s.p99, p99[t.name])
			s.cpu = append(s.cpu, r.cpuPerQuery())
			s.all = append(s.all, r.lats...)
			fmt.Printf("mixed %-22s round %d: %6d answered, p50 %6.1f µs, p99 %7.1f µs, CPU/query %5.2f µs\n",
				t.name, round, r.completed, 1e6*percentile(r.lats, 0.5), 1e6*p99[t.name], 1e6*r.cpuPerQuery())
		}
		for _, t := range targets {
			v, ok := p99[t.name]
			if ref, rok := p99[ref]; ok && rok {
				stats[t.name].ratio = append(stats[t.name].ratio, v/ref)
			}
		}
	}
	return stats, nil
}

// printLatencyTable prints the mixed run's figures as a Markdown table:
// the median over the rounds, with the spread (min-max) of the p99 and
// of its ratio to ref.
func printLatencyTable(cfg *runConfig, targets []target, ref string, stats map[string]*latencyStats) {
	fmt.Printf("\n# mixed at %d QPS (%s runs, %d rounds; a third each table answers, cache hits, forwarded misses): median, (min-max)\n\n",
		cfg.p99QPS, cfg.p99Duration, cfg.rounds)
	fmt.Printf("| server | p50 µs | p99 µs | p99 / %s's | pooled p99 µs | pooled p99 / %s's | CPU/query µs |\n|---|---|---|---|---|---|---|\n", ref, ref)
	var refPooled float64
	if s := stats[ref]; s != nil && len(s.all) > 0 {
		refPooled = percentile(s.all, 0.99)
	}
	for _, t := range targets {
		s := stats[t.name]
		if len(s.p99) == 0 {
			fmt.Printf("| %s | - | - | - | - | - | - (%d runs failed) |\n", t.name, s.failed)
			continue
		}
		pooled := percentile(s.all, 0.99)
		pooledRatio := "-"
		if refPooled > 0 {
			pooledRatio = fmt.Sprintf("%.2f", pooled/refPooled)
		}
		ratio := "-"
		if len(s.ratio) > 0 {
			ratio = fmt.Sprintf("%.2f (%.2f-%.2f)", median(s.ratio), slices.Min(s.ratio), slices.Max(s.ratio))
		}
		failed := ""
		if s.failed > 0 {
			failed = fmt.Sprintf(" (%d runs failed)", s.failed)
		}
		fmt.Printf("| %s | %.0f | %.0f (%.0f-%.0f) | %s | %.0f | %s | %.2f%s |\n", t.name, 1e6*median(s.p50),
			1e6*median(s.p99), 1e6*slices.Min(s.p99), 1e6*slices.Max(s.p99), ratio, 1e6*pooled, pooledRatio,
			1e6*median(s.cpu), failed)
	}
}

// benchMixed is -mixed: the mixed latency run alone, the agent of each
// meshdns binary (cfg.agent, or every one of cfg.ab) beside the peers.
func benchMixed(cfg *runConfig) error {
	_, up, err := startUpstream(cfg)
	if err != nil {
		return err
	}
	defer up.stop()
	bins := cfg.ab
	if len(bins) == 0 && cfg.agent != "" {
		bins = []string{cfg.agent}
	}
	var targets []target
	defer func() {
		for _, t := range targets {
			t.c.stop()
		}
	}()
	for k, bin := range bins {
		acfg := *cfg
		acfg.agent, acfg.dir = bin, filepath.Join(cfg.dir, fmt.Sprintf("agent%d", k))
		if err := os.MkdirAll(acfg.dir, 0o755); err != nil {
			return err
		}
		c, err := startAgent(&acfg, cfg.services, up.addr)
		if err != nil {
			return fmt.Errorf("start agent %s: %w", bin, err)
		}
		targets = append(targets, target{name: agentName(k, len(bins)), c: c})
		fmt.Printf("# meshdns %d: %s\n", k, bin)
	}
	return runMixed(cfg, targets, up)
}

// agentName names agent k of n in the mixed run's rows; benchAB and
// benchMixed print which binary each is.
func agentName(k, n int) string {
	if n == 1 {
		return "meshdns"
	}
	return fmt.Sprintf("meshdns %d", k)
}

// runMixed starts the peers beside targets (meshdns agents) on the same
// upstream, runs the mixed latency rounds and prints the table.
func runMixed(cfg *runConfig, targets []target, up *child) error {
	peers, err := startPeers(cfg, cfg.peers, cfg.services, up.addr)
	if err != nil {
		return err
	}
	defer func() {
		for _, p := range peers {
			p.c.stop()
		}
	}()
	file, err := writeNames(cfg, mixedScenario())
	if err != nil {
		return err
	}
	all := append(slices.Clone(targets), peers...)
	fmt.Printf("\n# mixed latency: %d services, %d names, servers on cpu %s one at a time, dnsperf and the upstream on cpu %s, SCHED_FIFO: %v\n",
		cfg.services, cfg.names, cfg.serverCPU, cfg.clientCPU, cfg.chrt != "")
	stats, err := mixedLatency(cfg, all, "unbound", up, file)
	if err != nil {
		return err
	}
	printLatencyTable(cfg, all, "unbound", stats)
	return nil
}
