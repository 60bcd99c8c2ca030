package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
)

func main() {
	if spec := os.Getenv(fleetEnv); spec != "" {
		if err := runFleet(spec, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "churn fleet:", err)
			os.Exit(1)
		}
		return
	}
	c := DefaultConfig()
	flag.StringVar(&c.Meshdns, "meshdns", "", "meshdns binary to run (default: go build ./cmd/meshdns into the run's folder)")
	flag.IntVar(&c.Agents, "agents", c.Agents, "agents connected to the replica at the start")
	flag.IntVar(&c.Procs, "procs", c.Procs, "fleet processes the agents are spread over")
	flag.IntVar(&c.Namespaces, "namespaces", c.Namespaces, "namespaces the agents are spread over")
	flag.DurationVar(&c.Ramp, "ramp", 0, "spread the first connects over this long (default 2ms per agent)")
	flag.BoolVar(&c.TLS, "tls", false, "serve mTLS; each agent presents a SPIFFE certificate of its own")
	flag.IntVar(&c.Services, "services", c.Services, "Services in the cluster")
	flag.IntVar(&c.Headless, "headless", c.Headless, "headless Services among them")
	flag.IntVar(&c.Endpoints, "endpoints", c.Endpoints, "endpoints of a headless Service (it moves between half and 1.5 times this)")
	flag.IntVar(&c.HotServices, "hot-services", c.HotServices, "Services among them that the Service churn creates and deletes")
	flag.Float64Var(&c.ServiceRate, "service-rate", c.ServiceRate, "Services created a second, and as many deleted")
	flag.Float64Var(&c.EndpointRate, "endpoint-rate", c.EndpointRate, "headless endpoint changes a second")
	flag.Float64Var(&c.PodRate, "pod-rate", c.PodRate, "pods started a second in the cluster, and as many stopped; the replica sees 1/-replicas of them")
	flag.IntVar(&c.Replicas, "replicas", c.Replicas, "replicas the cluster's agents are spread over")
	flag.DurationVar(&c.Duration, "duration", c.Duration, "how long changes flow (the run is bounded: setup and settle add at most a few minutes)")
	flag.DurationVar(&c.Interval, "interval", c.Interval, "time between report lines")
	flag.DurationVar(&c.Settle, "settle", c.Settle, "bound on the wait for the first tables and, after the churn, for every agent to reach the last change")
	flag.DurationVar(&c.Starve, "starve", c.Starve, "an agent without an update for longer while changes flow is starved")
	flag.IntVar(&c.Nice, "nice", c.Nice, "niceness of the fleet processes (0: none); a niceness yields the cores to the control plane, but on a loaded machine starves the simulated agents")
	flag.Uint64Var(&c.Seed, "seed", c.Seed, "seed of the changes and the pod churn")
	keep := flag.Bool("keep", false, "keep the run's folder")
	flag.Parse()
	os.Exit(run1(c, *keep))
}

func run1(c Config, keep bool) int {
	// The control plane holds a descriptor per agent, and so does the
	// fleet process of each; 256 more are left for its own (listeners,
	// the file watch, the admin port's clients).
	if lim, err := raiseNoFile(uint64(c.Agents) + 256); err != nil {
		fmt.Fprintf(os.Stderr, "churn: %v: at most %d agents fit\n", err, max(int(lim)-256, 0))
		return 1
	}
	dir, err := os.MkdirTemp("", "meshdns-churn-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "churn:", err)
		return 1
	}
	if !keep {
		defer os.RemoveAll(dir)
	}
	c.Dir = dir
	if c.Meshdns == "" {
		c.Meshdns = filepath.Join(dir, "meshdns")
		fmt.Fprintln(os.Stderr, "churn: go build ./cmd/meshdns")
		cmd := exec.Command("go", "build", "-o", c.Meshdns, "github.com/meshdns/meshdns/cmd/meshdns")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			fmt.Fprintln(os.Stderr, "churn: build meshdns:", err)
			return 1
		}
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "churn:", err)
		return 1
	}
	c.Self = []string{self}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	res, err := Run(ctx, c)
	if err != nil {
		fmt.Fprintln(os.Stderr, "churn:", err)
		return 1
	}
	if !res.OK() {
		return 1
	}
	return 0
}

// raiseNoFile raises this process's open-file limit (soft and hard) to at
// least n, which the control plane and the fleet processes inherit, and
// returns the limit in force. Raising the hard limit needs
// CAP_SYS_RESOURCE; without it the soft limit goes as far as the hard one.
func raiseNoFile(n uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("get open-file limit: %w", err)
	}
	if lim.Cur >= n {
		return lim.Cur, nil
	}
	want := syscall.Rlimit{Cur: n, Max: max(lim.Max, n)}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &want); err == nil {
		return n, nil
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, fmt.Errorf("set open-file limit: %w", err)
	}
	if lim.Cur >= n {
		return lim.Cur, nil
	}
	return lim.Cur, fmt.Errorf("open-file limit %d (hard), below the %d this run needs, and raising it needs CAP_SYS_RESOURCE", lim.Cur, n)
}
