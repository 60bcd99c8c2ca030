package main

import (
	"fmt"
	"os"
	"strconv"
	"time"
)

// benchFailingRatio measures the cost of the failing-names summary
// (pkg/proxy FailingNames, the agent's failing report): for a table
// answer, a table NXDOMAIN (the answer it records) and a cache hit, a
// server without the summary and one with it (topN names), in pairs run
// one after the other on the same queries as -policy does, and the median
// ratio of their CPU per query. Bar: 1.03 for the answers it does not
// record.
func benchFailingRatio(cfg *runConfig, topN int) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	up, err := start(cfg, cfg.clientCPU, self, "upstream")
	if err != nil {
		return fmt.Errorf("start upstream: %w", err)
	}
	defer up.stop()
	serve := func(topN int) (*child, error) {
		return start(cfg, cfg.serverCPU, self, "serve", "-services", strconv.Itoa(cfg.services), "-upstream", up.addr,
			"-failing-top-n", strconv.Itoa(topN))
	}
	scs := scenarios()
	fmt.Printf("# benchdns -failing %d: %d services, %d names per scenario, %d rounds of %s runs, server on cpu %s, dnsperf on cpu %s\n",
		topN, cfg.services, cfg.names, cfg.rounds, cfg.duration, cfg.serverCPU, cfg.clientCPU)
	fmt.Printf("# ratio = CPU/query with the summary / without, the runs of a pair one after the other on the same queries\n")
	fmt.Printf("%-16s %-5s %10s %10s %12s %14s %8s\n", "scenario", "round", "queries", "QPS", "avg lat µs", "CPU/query µs", "ratio")
	for _, sc := range []scenario{scs[0], scs[2], scs[3]} { // known, nxdomain, cache-hit
		plain, err := serve(0)
		if err != nil {
			return fmt.Errorf("start server: %w", err)
		}
		with, err := serve(topN)
		if err != nil {
			plain.stop()
			return fmt.Errorf("start server with the summary: %w", err)
		}
		file, err := writeNames(cfg, sc)
		if err == nil {
			_, err = measure(cfg, plain, file, time.Second, 0)
		}
		if err == nil {
			_, err = measure(cfg, with, file, time.Second, 0)
		}
		var ratios []float64
		for round := 1; round <= cfg.rounds && err == nil; round++ {
			var base, r perfResult
			if base, r, err = policyPair(cfg, plain, with, file, round%2 == 0); err != nil {
				break
			}
			ratio := r.cpuPerQuery() / base.cpuPerQuery()
			ratios = append(ratios, ratio)
			printRow("  no summary", round, base, 1)
			printRow(sc.name, round, r, ratio)
		}
		plain.stop()
		with.stop()
		if err != nil {
			return fmt.Errorf("%s: %w", sc.name, err)
		}
		m := median(ratios)
		bar := ""
		if sc.name != "nxdomain" {
			bar = fmt.Sprintf(" (bar 1.03) %s", verdict(m <= 1.03))
		}
		fmt.Printf("%-16s median CPU/query ratio with the summary %.3f%s\n", sc.name, m, bar)
	}
	return nil
}
