// Command agentload opens many lightweight agent streams to one or more
// control planes, so a load test's agents run in their own processes and
// do not share the control plane's CPU accounting. Every agent ACKs what it
// gets, resumes from its last version and moves to the next address when a
// stream ends, as the real agent does. It prints one line per applied
// response (see internal/testkit/loadagent.FormatEvent) and stops after -duration.
//
//	go run ./hack/agentload -addrs 127.0.0.1:15010 -agents 5000 -namespaces 100 -duration 2m
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/meshdns/meshdns/internal/testkit/loadagent"
)

func main() {
	var f loadagent.Fleet
	addrs := flag.String("addrs", "127.0.0.1:15010", "control plane gRPC addresses, comma-separated; agent i starts at the (i mod n)th")
	flag.IntVar(&f.Agents, "agents", 1000, "agent streams to open (each its own connection)")
	flag.IntVar(&f.First, "first", 0, "index of the first agent (pod-<i> in ns-<i mod namespaces>), to split a fleet over processes")
	flag.IntVar(&f.Namespaces, "namespaces", 1, "namespaces the agents are spread over")
	flag.StringVar(&f.Watch, "watch", "", "hostname whose new address each delta reports")
	flag.DurationVar(&f.Ramp, "ramp", 0, "spread the connects over this long")
	flag.IntVar(&f.Sources, "sources", 0, "dial from this many loopback addresses (127.1.0.1 on), agent i from the (i mod n)th, as pods of distinct addresses; 0 lets the kernel choose")
	duration := flag.Duration("duration", 10*time.Minute, "stop after this long (the run is always bounded)")
	flag.Parse()
	f.Addrs = strings.Split(*addrs, ",")
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	ctx, stop := context.WithTimeout(ctx, *duration)
	defer stop()
	if err := loadagent.RunFleet(ctx, f, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "agentload:", err)
		os.Exit(1)
	}
}
