package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meshdns/meshdns/pkg/policy"
	"github.com/meshdns/meshdns/pkg/proxy"
)

// benchPolicy is a DNS policy of n rules (nil for 0) under which every
// scenario's answer is still allowed: the scenarios' outside names
// (host<i>.example.com) by one wildcard, the table's by the table
// default, and n-1 rules for other names, half exact, half wildcards,
// so that a decision probes maps of the full size. Outside names no rule
// matches are denied.
func benchPolicy(n int) (*proxy.Policy, error) {
	if n <= 0 {
		return nil, nil
	}
	rules := []policy.Rule{{Pattern: "*.example.com", Action: policy.Allow}}
	for i := 1; i < n; i++ {
		pat := fmt.Sprintf("api%d.vendor%d.example.net", i, i%97)
		if i%2 == 1 {
			pat = fmt.Sprintf("*.bucket%d.example.org", i)
		}
		rules = append(rules, policy.Rule{Pattern: pat, Action: policy.Allow})
	}
	return proxy.NewPolicy(policy.Config{Rules: rules, OutsideDefault: policy.Deny}, nil)
}

// policyScenarios are the paths a policy adds work to: a table answer, a
// Resolver cache hit, and a query forwarded upstream every time (the
// servers of that scenario run without a cache).
func policyScenarios() []scenario {
	scs := scenarios()
	return []scenario{scs[0], scs[3], {name: "forwarded", lines: scs[3].lines}}
}

// benchPolicyRatio measures the cost of enforcing a policy of rules rules:
// for each scenario a server without a policy and one with it, in pairs
// run one after the other on the same query file, and the median ratio
// of their CPU per query over the rounds (the order within a pair
// alternates, so a drift of the machine's load favours neither side; with
// -side-by-side both run at once, each with its own dnsperf). Bar: 1.05 for the forwarded
// query.
func benchPolicyRatio(cfg *runConfig, rules int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	up, err := start(cfg, cfg.clientCPU, self, "upstream")
	if err != nil {
		return fmt.Errorf("start upstream: %w", err)
	}
	defer up.stop()
	serve := func(rules int, cacheSize string) (*child, error) {
		return start(cfg, cfg.serverCPU, self, "serve", "-services", strconv.Itoa(cfg.services), "-upstream", up.addr,
			"-policy-rules", strconv.Itoa(rules), "-cache-size", cacheSize)
	}
	fmt.Printf("# benchdns -policy %d: %d services, %d names per scenario, %d rounds of %s runs, server on cpu %s, dnsperf on cpu %s\n",
		rules, cfg.services, cfg.names, cfg.rounds, cfg.duration, cfg.serverCPU, cfg.clientCPU)
	fmt.Printf("# ratio = CPU/query with the policy / without, the runs of a pair one after the other on the same queries\n")
	fmt.Printf("%-16s %-5s %10s %10s %12s %14s %8s\n", "scenario", "round", "queries", "QPS", "avg lat µs", "CPU/query µs", "ratio")
	ok := true
	for _, sc := range policyScenarios() {
		if cfg.only != "" && !slices.Contains(strings.Split(cfg.only, ","), sc.name) {
			continue
		}
		cache := "0"
		if sc.name == "forwarded" {
			cache = "-1"
		}
		plain, err := serve(0, cache)
		if err != nil {
			return fmt.Errorf("start server: %w", err)
		}
		withPol, err := serve(rules, cache)
		if err != nil {
			plain.stop()
			return fmt.Errorf("start server with policy: %w", err)
		}
		file, err := writeNames(cfg, sc)
		if err == nil {
			_, err = measure(cfg, plain, file, time.Second, 0)
		}
		if err == nil {
			_, err = measure(cfg, withPol, file, time.Second, 0)
		}
		var ratios []float64
		var base, r perfResult
		for round := 1; round <= cfg.rounds && err == nil; round++ {
			if base, r, err = policyPair(cfg, plain, withPol, file, round%2 == 0); err != nil {
				break
			}
			ratio := r.cpuPerQuery() / base.cpuPerQuery()
			ratios = append(ratios, ratio)
			printRow("  no policy", round, base, 1)
			printRow(sc.name, round, r, ratio)
		}
		plain.stop()
		withPol.stop()
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		m := median(ratios)
		bar := ""
		if sc.name == "forwarded" {
			bar = fmt.Sprintf(" (bar 1.05) %s", verdict(m <= 1.05))
			ok = ok && m <= 1.05
		}
		fmt.Printf("%-16s median CPU/query ratio with %d rules %.3f%s\n", sc.name, rules, m, bar)
	}
	if !ok {
		fmt.Println("\nsome figures miss their bar")
	}
	return nil
}

// policyPair measures plain and withPol on file: one after the other
// (withPol first when swap), or both at once with cfg.sideBySide.
func policyPair(cfg *runConfig, plain, withPol *child, file string, swap bool) (base, r perfResult, err error) {
	if cfg.sideBySide {
		var berr, perr error
		var wg sync.WaitGroup
		wg.Go(func() { base, berr = measure(cfg, plain, file, cfg.duration, 0) })
		wg.Go(func() { r, perr = measure(cfg, withPol, file, cfg.duration, 0) })
		wg.Wait()
		return base, r, errors.Join(berr, perr)
	}
	first, second := plain, withPol
	if swap {
		first, second = withPol, plain
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
