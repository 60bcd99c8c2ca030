package main

import (
	"fmt"
	"io"
	"time"
)

// printTable writes rows as the Markdown table of docs/benchmarks.md.
func printTable(w io.Writer, cfg config, rows []row) {
	fmt.Fprintf(w, "%s looked up with getaddrinfo in a pod (search demo.svc.cluster.local svc.cluster.local cluster.local, ndots:5);\n", cfg.name)
	fmt.Fprintf(w, "CoreDNS one veth hop away, %s added each way; median of %d lookups after the first.\n\n", cfg.delay, cfg.count)
	fmt.Fprintln(w, "| client | setup | queries to CoreDNS, first lookup | its time | queries to CoreDNS per lookup, next | median time, next |")
	fmt.Fprintln(w, "|---|---|--:|--:|--:|--:|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %s | %d | %s | %.1f | %s |\n", r.libc, r.setup, r.firstQueries, ms(r.first), r.queriesPerRun, ms(r.median))
	}
}

func ms(d time.Duration) string {
	return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
}
