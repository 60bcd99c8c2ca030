// Command benchdns measures the meshdns DNS data plane against a minimal Go
// UDP reflector, the data plane's performance bar: CPU time per answered query
// (utime+stime of the server process over a dnsperf run, divided by the
// queries completed), p99 latency at a fixed rate, and RSS.
//
// Usage: benchdns [run flags]      (what `make bench-dns` runs)
//
//	benchdns memory [flags]          (what `make bench-memory` runs: memory.go)
//
//	benchdns starts [flags]          (agents' starts compared, interleaved: memstart.go)
//
//	benchdns reflector|upstream|serve [flags]   (the processes run starts)
//
// dnsperf and the servers are pinned to different cores with taskset, so a
// server's CPU time is its own and not the load generator's.
package main

import (
	"fmt"
	"os"
)

func main() {
	cmd, args := "run", os.Args[1:]
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "run":
		err = runBench(args)
	case "reflector":
		err = runReflector(args)
	case "upstream":
		err = runUpstream(args)
	case "serve":
		err = runServe(args)
	case "memory":
		err = runMemory(args)
	case "starts":
		err = runStarts(args)
	default:
		err = fmt.Errorf("unknown command %q (run, memory, starts, reflector, upstream, serve)", cmd)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "benchdns: %v\n", err)
		os.Exit(1)
	}
}
