package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// featureBench is the cost of one feature of the serve process, with
// against without: a DNS policy (-policy) or the failing-names summary
// (-failing).
type featureBench struct {
	// flag and n name the run in its header ("-policy 1000"); with is
	// what the "with" server has, for the figures ("1000 rules").
	flag  string
	n     int
	with  string
	cases []featureCase
}

// featureCase is one scenario of a featureBench.
type featureCase struct {
	sc scenario
	// args are the serve flags of the server without the feature (off)
	// or with it (on).
	args func(on bool) []string
	// bar is the highest median ratio that passes, 0 for none.
	bar float64
}

// policyBench measures a policy of rules rules on the paths it adds work
// to: a table answer, a Resolver cache hit, and a query forwarded
// upstream every time (the servers of that scenario run without a
// cache). Bar: 1.05 for the forwarded query.
func policyBench(rules int) featureBench {
	scs := scenarios()
	args := func(cache string) func(bool) []string {
		return func(on bool) []string {
			n := 0
			if on {
				n = rules
			}
			return []string{"-policy-rules", strconv.Itoa(n), "-cache-size", cache}
		}
	}
	return featureBench{flag: "-policy", n: rules, with: fmt.Sprintf("%d rules", rules), cases: []featureCase{
		{sc: scs[0], args: args("0")},
		{sc: scs[3], args: args("0")},
		{sc: scenario{name: "forwarded", lines: scs[3].lines}, args: args("-1"), bar: 1.05},
	}}
}

// failingBench measures the failing-names summary (pkg/proxy
// FailingNames, the agent's failing report) reporting topN names: for a
// table answer, a table NXDOMAIN (the answer it records) and a cache hit.
// Bar: 1.03 for the answers it does not record.
func failingBench(topN int) featureBench {
	scs := scenarios()
	args := func(on bool) []string {
		n := 0
		if on {
			n = topN
		}
		return []string{"-failing-top-n", strconv.Itoa(n)}
	}
	return featureBench{flag: "-failing", n: topN, with: "the summary", cases: []featureCase{
		{sc: scs[0], args: args, bar: 1.03}, // known
		{sc: scs[2], args: args},            // nxdomain
		{sc: scs[3], args: args, bar: 1.03}, // cache-hit
	}}
}

// benchFeatureRatio measures fb: for each case a server without the
// feature and one with it, in pairs run one after the other on the same
// query file, and the median ratio of their CPU per query over the rounds
// (the order within a pair alternates, so a drift of the machine's load
// favours neither side; with -side-by-side both run at once, each with
// its own dnsperf).
func benchFeatureRatio(cfg *runConfig, fb featureBench) error {
	self, up, err := startUpstream(cfg)
	if err != nil {
		return err
	}
	defer up.stop()
	serve := func(args []string) (*child, error) {
		return start(cfg, cfg.serverCPU, self, append([]string{"serve", "-services", strconv.Itoa(cfg.services), "-upstream", up.addr}, args...)...)
	}
	fmt.Printf("# benchdns %s %d: %d services, %d names per scenario, %d rounds of %s runs, server on cpu %s, dnsperf on cpu %s\n",
		fb.flag, fb.n, cfg.services, cfg.names, cfg.rounds, cfg.duration, cfg.serverCPU, cfg.clientCPU)
	fmt.Printf("# ratio = CPU/query with %s / without, the runs of a pair one after the other on the same queries\n", fb.with)
	fmt.Printf("%-16s %-5s %10s %10s %12s %14s %8s\n", "scenario", "round", "queries", "QPS", "avg lat µs", "CPU/query µs", "ratio")
	ok := true
	for _, fc := range fb.cases {
		if cfg.only != "" && !slices.Contains(strings.Split(cfg.only, ","), fc.sc.name) {
			continue
		}
		m, err := featureCaseRatio(cfg, fc, serve)
		if err != nil {
			return fmt.Errorf("%s: %w", fc.sc.name, err)
		}
		bar := ""
		if fc.bar > 0 {
			bar = fmt.Sprintf(" (bar %.2f) %s", fc.bar, verdict(m <= fc.bar))
			ok = ok && m <= fc.bar
		}
		fmt.Printf("%-16s median CPU/query ratio with %s %.3f%s\n", fc.sc.name, fb.with, m, bar)
	}
	if !ok {
		fmt.Println("\nsome figures miss their bar")
	}
	return nil
}

// featureCaseRatio runs the rounds of one case and returns the median
// ratio.
func featureCaseRatio(cfg *runConfig, fc featureCase, serve func([]string) (*child, error)) (float64, error) {
	off, err := serve(fc.args(false))
	if err != nil {
		return 0, fmt.Errorf("start server: %w", err)
	}
	defer off.stop()
	on, err := serve(fc.args(true))
	if err != nil {
		return 0, fmt.Errorf("start server with the feature: %w", err)
	}
	defer on.stop()
	file, err := writeNames(cfg, fc.sc)
	if err != nil {
		return 0, err
	}
	for _, c := range []*child{off, on} { // warm up
		if _, err := measure(cfg, c, file, time.Second, 0); err != nil {
			return 0, err
		}
	}
	var ratios []float64
	for round := 1; round <= cfg.rounds; round++ {
		base, r, err := measurePair(cfg, off, on, file, round%2 == 0)
		if err != nil {
			return 0, err
		}
		ratio := r.cpuPerQuery() / base.cpuPerQuery()
		ratios = append(ratios, ratio)
		printRow("  without", round, base, 1)
		printRow(fc.sc.name, round, r, ratio)
	}
	return median(ratios), nil
}

// measurePair measures off and on on file: one after the other (on first
// when swap), or both at once with cfg.sideBySide.
func measurePair(cfg *runConfig, off, on *child, file string, swap bool) (base, r perfResult, err error) {
	if cfg.sideBySide {
		var berr, perr error
		var wg sync.WaitGroup
		wg.Go(func() { base, berr = measure(cfg, off, file, cfg.duration, 0) })
		wg.Go(func() { r, perr = measure(cfg, on, file, cfg.duration, 0) })
		wg.Wait()
		return base, r, errors.Join(berr, perr)
	}
	first, second := off, on
	if swap {
		first, second = on, off
	}
	a, err := measure(cfg, first, file, cfg.duration, 0)
	if err != nil {
		return base, r, err
	}
	b, err := measure(cfg, second, file, cfg.duration, 0)
	if swap {
		a, b = b, a
	}
	return a, b, err
}
