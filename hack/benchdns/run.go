package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

type runConfig struct {
	duration    time.Duration
	rounds      int
	sideBySide  bool
	p99Duration time.Duration
	p99QPS      int
	services    int
	large       int
	names       int
	maxQueries  int
	serverCPU   string
	clientCPU   string
	dnsperf     string
	agent       string
	chrt        string // chrt binary for the latency runs, or empty
	taskset     string
	dir         string
	// ab lists agent binaries measured against the first (-ab), or nil.
	ab []string
	// only filters the scenarios of -policy by name, or "".
	only string
	// profile is where -ab writes a perf profile of each agent per
	// scenario, or "".
	profile string
	// peers are the other servers of the mixed latency run.
	peers peerBinaries
}

func runBench(args []string) error {
	var cfg runConfig
	fs := flag.NewFlagSet("run", flag.ExitOnError)
	fs.DurationVar(&cfg.duration, "duration", 4*time.Second, "length of each throughput run")
	fs.BoolVar(&cfg.sideBySide, "side-by-side", false, "run each reflector/meshdns pair at the same time (both servers share the server core) instead of one after the other")
	fs.IntVar(&cfg.rounds, "rounds", 5, "rounds of reflector/meshdns pairs per scenario (and latency runs)")
	fs.DurationVar(&cfg.p99Duration, "p99-duration", 5*time.Second, "length of each fixed-rate latency run")
	fs.IntVar(&cfg.p99QPS, "p99-qps", 10000, "rate of the latency runs")
	fs.IntVar(&cfg.services, "services", 10000, "services in the table of the measured server")
	fs.IntVar(&cfg.large, "services-large", 100000, "services in the table of the RSS-only run (0: skip)")
	fs.IntVar(&cfg.names, "names", 1000, "distinct names per scenario")
	fs.IntVar(&cfg.maxQueries, "max-queries", 3000000, "cap on queries per throughput run")
	fs.StringVar(&cfg.serverCPU, "server-cpu", "1", "taskset cpu list for the servers")
	fs.StringVar(&cfg.clientCPU, "client-cpu", "0", "taskset cpu list for dnsperf")
	fs.StringVar(&cfg.agent, "agent", "bin/meshdns", "meshdns binary whose agent command is measured too (empty: skip)")
	ab := fs.String("ab", "", "comma-separated meshdns binaries with an agent command: measure every scenario on each against the first (an older build) and nothing else")
	fs.StringVar(&cfg.profile, "profile", "", "with -ab: before the rounds, record a perf profile (perf record -g) of each agent on each scenario into this directory")
	fs.StringVar(&cfg.only, "only", "", "with -policy or -failing: the comma-separated scenarios to run (-policy: known, cache-hit, forwarded; -failing: known, nxdomain, cache-hit; empty: all)")
	policyRules := fs.Int("policy", 0, "measure the cost of a DNS policy of this many rules (with against without, for a table answer, a cache hit and a forwarded query) and nothing else")
	failingTopN := fs.Int("failing", 0, "measure the cost of the failing-names summary reporting this many names (with against without, for a table answer, a table NXDOMAIN and a cache hit) and nothing else")
	mixed := fs.Bool("mixed", false, "run the mixed latency run alone: the agent (-agent, or each of -ab) beside unbound, dnsmasq and CoreDNS")
	fs.StringVar(&cfg.peers.unbound, "unbound", "unbound", "unbound binary of the mixed latency run (empty: leave it out)")
	fs.StringVar(&cfg.peers.dnsmasq, "dnsmasq", "dnsmasq", "dnsmasq binary of the mixed latency run (empty: leave it out)")
	fs.StringVar(&cfg.peers.coredns, "coredns", defaultCoreDNS(), "CoreDNS binary of the mixed latency run (empty: leave it out)")
	rt := fs.Bool("rt", true, "run the fixed-rate latency runs at SCHED_FIFO priority (root), so other load on the machine does not set the p99")
	_ = fs.Parse(args)
	cfg.agent = agentPath(cfg.agent)
	if p, err := exec.LookPath("chrt"); err == nil && *rt && os.Geteuid() == 0 {
		cfg.chrt = p
	}

	var err error
	if cfg.dnsperf, err = exec.LookPath("dnsperf"); err != nil {
		return errors.New("dnsperf not found (apt-get install dnsperf)")
	}
	if cfg.taskset, err = exec.LookPath("taskset"); err != nil || runtime.NumCPU() < 2 {
		fmt.Println("# taskset or a second core missing: running unpinned; CPU figures include contention")
		cfg.taskset = ""
	}
	if cfg.dir, err = os.MkdirTemp("", "benchdns"); err != nil {
		return err
	}
	defer os.RemoveAll(cfg.dir)
	cfg.peers = lookPeers(cfg.peers)
	if *ab != "" {
		cfg.ab = strings.Split(*ab, ",")
	}
	if *mixed {
		return benchMixed(&cfg)
	}
	if *ab != "" {
		return benchAB(&cfg)
	}
	if *policyRules > 0 {
		return benchFeatureRatio(&cfg, policyBench(*policyRules))
	}
	if *failingTopN > 0 {
		return benchFeatureRatio(&cfg, failingBench(*failingTopN))
	}
	return bench(&cfg)
}

// scenario is one dnsperf input.
type scenario struct {
	name  string
	lines func(i int) string // the query lines of the i-th distinct name
	bar   float64            // the highest CPU/query ratio to the reflector that passes
}

func scenarios() []scenario {
	return []scenario{
		{name: "known", bar: 1.15, lines: func(i int) string {
			return fmt.Sprintf("svc%d.ns%d.svc.cluster.local A", i, i%namespaces)
		}},
		{name: "search-expanded", bar: 1.15, lines: func(i int) string {
			// svc.ns + the first search domain: CNAME + A in one answer.
			return fmt.Sprintf("svc%d.ns%d.%s.svc.cluster.local A", i, i%namespaces, podNamespace)
		}},
		{name: "nxdomain", bar: 1.15, lines: func(i int) string {
			// The ndots:5 walk of an external name: authoritative NXDOMAIN.
			return fmt.Sprintf("host%d.example.com.%s.svc.cluster.local A", i, podNamespace)
		}},
		{name: "cache-hit", bar: 1.3, lines: func(i int) string {
			return fmt.Sprintf("host%d.example.com A", i)
		}},
		// The working set of a pod: every name through the search path,
		// A and AAAA as a resolver asks them, more questions than the
		// answer cache of a table of this size keeps. Such answers must
		// cost what a cached one does.
		{name: "search-set", bar: 1.15, lines: func(i int) string {
			// CNAME + A, and CNAME + NODATA (SOA).
			name := fmt.Sprintf("svc%d.ns%d.%s.svc.cluster.local", i, i%namespaces, podNamespace)
			return name + " A\n" + name + " AAAA"
		}},
		{name: "nxdomain-other", bar: 1.15, lines: func(i int) string {
			// The ndots:5 walk of a pod in another namespace, whose
			// search domains are not this pod's: NXDOMAIN + SOA.
			name := fmt.Sprintf("host%d.example.com.ns%d.svc.cluster.local", i, 1+i%(namespaces-1))
			return name + " A\n" + name + " AAAA"
		}},
	}
}

type perfResult struct {
	completed int
	qps       float64
	avgLat    float64 // seconds
	lats      []float64
	cpu       float64 // server CPU seconds over the run
}

func (r perfResult) cpuPerQuery() float64 { return r.cpu / float64(r.completed) }

func bench(cfg *runConfig) error {
	self, up, err := startUpstream(cfg)
	if err != nil {
		return err
	}
	defer up.stop()
	refl, err := start(cfg, cfg.serverCPU, self, "reflector")
	if err != nil {
		return fmt.Errorf("start reflector: %w", err)
	}
	defer refl.stop()
	srv, err := start(cfg, cfg.serverCPU, self, "serve", "-services", strconv.Itoa(cfg.services), "-upstream", up.addr)
	if err != nil {
		return fmt.Errorf("start server: %w", err)
	}
	defer srv.stop()

	fmt.Printf("# benchdns: %d services, %d names per scenario, %d rounds of %s runs, server on cpu %s, dnsperf on cpu %s\n",
		cfg.services, cfg.names, cfg.rounds, cfg.duration, cfg.serverCPU, cfg.clientCPU)
	fmt.Printf("# CPU/query = server utime+stime over the run / queries completed; ratio = meshdns / the reflector run just before it\n")
	fmt.Printf("%-16s %-5s %10s %10s %12s %14s %8s\n", "scenario", "round", "queries", "QPS", "avg lat µs", "CPU/query µs", "ratio")

	scs := scenarios()
	files := make([]string, len(scs))
	for i, sc := range scs {
		if files[i], err = writeNames(cfg, sc); err != nil {
			return err
		}
		// Warm up: fill the answer cache and the upstream cache.
		if _, err := measure(cfg, srv, files[i], time.Second, 0); err != nil {
			return fmt.Errorf("%s warm-up: %w", sc.name, err)
		}
	}
	// Rounds interleave the reflector with the scenarios so that load from
	// other processes on the machine hits both sides alike; the median
	// ratio over the rounds is the figure.
	ratios := make([][]float64, len(scs))
	var baseCPU, agentRatios []float64
	var agent *child
	if cfg.agent != "" {
		if agent, err = startAgent(cfg, cfg.services, up.addr); err != nil {
			return fmt.Errorf("start agent: %w", err)
		}
		defer agent.stop()
		if _, err := measure(cfg, agent, files[0], time.Second, 0); err != nil {
			return fmt.Errorf("agent warm-up: %w", err)
		}
	}
	// Every meshdns run is paired with a reflector run just before it on
	// the same query file (query size matters to the kernel), and the
	// ratio is taken within the pair; rounds repeat the pairs and the
	// median ratio is the figure, so load from other processes that comes
	// and goes lands on both sides of most pairs.
	for round := 1; round <= cfg.rounds; round++ {
		pair := func(name, file string, c *child) (float64, error) {
			var base, r perfResult
			var berr, err error
			if cfg.sideBySide {
				// Both at once, each with its own dnsperf: they share the
				// server core, and a burst of other load hits both.
				var wg sync.WaitGroup
				wg.Go(func() { base, berr = measure(cfg, refl, file, cfg.duration, 0) })
				wg.Go(func() { r, err = measure(cfg, c, file, cfg.duration, 0) })
				wg.Wait()
			} else {
				if base, berr = measure(cfg, refl, file, cfg.duration, 0); berr == nil {
					r, err = measure(cfg, c, file, cfg.duration, 0)
				}
			}
			if berr != nil {
				return 0, fmt.Errorf("reflector: %w", berr)
			}
			if err != nil {
				return 0, fmt.Errorf("%s: %w", name, err)
			}
			baseCPU = append(baseCPU, base.cpuPerQuery())
			ratio := r.cpuPerQuery() / base.cpuPerQuery()
			printRow("  reflector", round, base, 1)
			printRow(name, round, r, ratio)
			return ratio, nil
		}
		for i, sc := range scs {
			ratio, err := pair(sc.name, files[i], srv)
			if err != nil {
				return err
			}
			ratios[i] = append(ratios[i], ratio)
		}
		if agent != nil {
			ratio, err := pair("known (agent)", files[0], agent)
			if err != nil {
				return err
			}
			agentRatios = append(agentRatios, ratio)
		}
	}
	ok := true
	fmt.Printf("\n# median over %d rounds (reflector CPU/query median %.2f µs)\n", cfg.rounds, 1e6*median(baseCPU))
	for i, sc := range scs {
		m := median(ratios[i])
		fmt.Printf("%-16s CPU/query ratio %.2f (bar %.2f) %s\n", sc.name, m, sc.bar, verdict(m <= sc.bar))
		ok = ok && m <= sc.bar
	}
	if agent != nil {
		m := median(agentRatios)
		fmt.Printf("%-16s CPU/query ratio %.2f (bar 1.15) %s  [bin/meshdns agent]\n", "known (agent)", m, verdict(m <= 1.15))
		ok = ok && m <= 1.15
	}

	fmt.Printf("\n# latency at %d QPS each (%s runs, reflector and meshdns measured side by side), known names, SCHED_FIFO: %v\n",
		cfg.p99QPS, cfg.p99Duration, cfg.chrt != "")
	var p99Ratios []float64
	for round := 1; round <= cfg.rounds; round++ {
		// Both servers are measured at the same time, each by its own
		// dnsperf: a stall of the machine (other processes, the
		// hypervisor) then lands on both, not on whichever ran during it.
		var rp, mp perfResult
		var rerr, merr error
		var wg sync.WaitGroup
		wg.Go(func() { rp, rerr = measureRT(cfg, refl, files[0]) })
		wg.Go(func() { mp, merr = measureRT(cfg, srv, files[0]) })
		wg.Wait()
		if err := errors.Join(rerr, merr); err != nil {
			return err
		}
		r99, m99 := percentile(rp.lats, 0.99), percentile(mp.lats, 0.99)
		p99Ratios = append(p99Ratios, m99/r99)
		fmt.Printf("round %d reflector p50 %7.1f µs p99 %8.1f µs | meshdns p50 %7.1f µs p99 %8.1f µs | p99 ratio %.2f\n",
			round, 1e6*percentile(rp.lats, 0.5), 1e6*r99, 1e6*percentile(mp.lats, 0.5), 1e6*m99, m99/r99)
	}
	m := median(p99Ratios)
	fmt.Printf("median p99 ratio %.2f (bar 1.50) %s\n", m, verdict(m <= 1.5))
	ok = ok && m <= 1.5
	if agent != nil {
		if err := runMixed(cfg, []target{{name: "meshdns", c: agent}}, up); err != nil {
			return fmt.Errorf("mixed latency: %w", err)
		}
	}

	fmt.Printf("\n# memory\n")
	rss, err := rssMB(srv.cmd.Process.Pid)
	if err != nil {
		return err
	}
	fmt.Printf("meshdns (serve) with %d services after the runs: %s; bar RSS < 30 MB %s\n", cfg.services, memReport(srv.cmd.Process.Pid), verdict(rss < 30))
	ok = ok && (cfg.services != 10000 || rss < 30)
	if cfg.large > 0 {
		big, err := start(cfg, cfg.serverCPU, self, "serve", "-services", strconv.Itoa(cfg.large), "-upstream", up.addr)
		if err != nil {
			return fmt.Errorf("start %d-service server: %w", cfg.large, err)
		}
		defer big.stop()
		if _, err := measure(cfg, big, files[0], time.Second, 0); err != nil {
			return err
		}
		fmt.Printf("meshdns (serve) with %d services: %s\n", cfg.large, memReport(big.cmd.Process.Pid))
	}
	if agent != nil {
		rss, err := rssMB(agent.cmd.Process.Pid)
		if err != nil {
			return fmt.Errorf("agent gone before the RSS reading: %w (%v)", err, agent.exitStatus())
		}
		fmt.Printf("agent with %d services after the runs: %s; bar RSS < 30 MB %s\n", cfg.services, memReport(agent.cmd.Process.Pid), verdict(rss < 30))
		ok = ok && (cfg.services != 10000 || rss < 30)
		agent.stop()
		if cfg.large > 0 {
			big, err := startAgent(cfg, cfg.large, up.addr)
			if err != nil {
				return fmt.Errorf("start %d-service agent: %w", cfg.large, err)
			}
			defer big.stop()
			if _, err := measure(cfg, big, files[0], time.Second, 0); err != nil {
				return err
			}
			fmt.Printf("agent with %d services: %s\n", cfg.large, memReport(big.cmd.Process.Pid))
		}
	}
	if !ok {
		fmt.Println("\nsome figures miss their bar")
	}
	return nil
}

func verdict(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISS"
}

func printRow(name string, round int, r perfResult, ratio float64) {
	fmt.Printf("%-16s %-5d %10d %10.0f %12.1f %14.2f %8.2f\n", name, round, r.completed, r.qps, 1e6*r.avgLat, 1e6*r.cpuPerQuery(), ratio)
}

func median(v []float64) float64 {
	return percentile(v, 0.5)
}

func writeNames(cfg *runConfig, sc scenario) (string, error) {
	path := filepath.Join(cfg.dir, sc.name+".txt")
	var b strings.Builder
	for i := range cfg.names {
		b.WriteString(sc.lines(i))
		b.WriteByte('\n')
	}
	return path, os.WriteFile(path, []byte(b.String()), 0o644)
}

// child is a server process the runner started.
type child struct {
	cmd  *exec.Cmd
	addr string
}

// exitStatus reaps a child that has exited and says how it ended.
func (c *child) exitStatus() string {
	err := c.cmd.Wait()
	return fmt.Sprintf("%v: %v", c.cmd.ProcessState, err)
}

func (c *child) stop() {
	_ = c.cmd.Process.Kill()
	_ = c.cmd.Wait()
}

// startUpstream starts this binary's upstream on the client CPU and
// returns the binary's path, for the servers it starts next.
func startUpstream(cfg *runConfig) (self string, up *child, err error) {
	if self, err = os.Executable(); err != nil {
		return "", nil, err
	}
	if up, err = start(cfg, cfg.clientCPU, self, "upstream"); err != nil {
		return "", nil, fmt.Errorf("start upstream: %w", err)
	}
	return self, up, nil
}

// start runs self with args pinned to cpus and waits for its "ready <addr>".
func start(cfg *runConfig, cpus, self string, args ...string) (*child, error) {
	var cmd *exec.Cmd
	if cfg.taskset != "" {
		cmd = exec.Command(cfg.taskset, append([]string{"-c", cpus, self}, args...)...)
	} else {
		cmd = exec.Command(self, args...)
	}
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &child{cmd: cmd}
	ready := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line := sc.Text()
			if a, ok := strings.CutPrefix(line, "ready "); ok {
				c.addr = a
				ready <- nil
				_, _ = io.Copy(io.Discard, out)
				return
			}
			ready <- fmt.Errorf("unexpected output %q", line)
			return
		}
		ready <- errors.New("exited before ready")
	}()
	select {
	case err := <-ready:
		if err != nil {
			c.stop()
			return nil, err
		}
	case <-time.After(2 * time.Minute):
		c.stop()
		return nil, errors.New("not ready after 2m")
	}
	return c, nil
}

var (
	reCompleted = regexp.MustCompile(`Queries completed:\s+(\d+)`)
	reQPS       = regexp.MustCompile(`Queries per second:\s+([\d.]+)`)
	reAvg       = regexp.MustCompile(`Average Latency \(s\):\s+([\d.]+)`)
)

// measure runs dnsperf against c for d (at qps when > 0, with per-query
// latencies) and reads the server's CPU time around it.
func measure(cfg *runConfig, c *child, file string, d time.Duration, qps int) (perfResult, error) {
	host, port, err := net.SplitHostPort(c.addr)
	if err != nil {
		return perfResult{}, err
	}
	secs := max(1, int(d.Round(time.Second)/time.Second))
	maxRuns := max(1, cfg.maxQueries/cfg.names)
	args := []string{"-s", host, "-p", port, "-d", file, "-l", strconv.Itoa(secs), "-n", strconv.Itoa(maxRuns),
		"-c", "1", "-T", "1", "-q", "100", "-t", "2"}
	if qps > 0 {
		args = append(args, "-Q", strconv.Itoa(qps), "-v")
	}
	name := cfg.dnsperf
	if cfg.taskset != "" {
		args = append([]string{"-c", cfg.clientCPU, name}, args...)
		name = cfg.taskset
	}
	if qps > 0 && cfg.chrt != "" {
		args = append([]string{"-f", "10", name}, args...)
		name = cfg.chrt
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs+30)*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	var res perfResult
	before, err := cpuSeconds(c.cmd.Process.Pid)
	if err != nil {
		return res, err
	}
	out, err := cmd.Output()
	after, err2 := cpuSeconds(c.cmd.Process.Pid)
	if err != nil {
		return res, fmt.Errorf("dnsperf %v: %w", args, err)
	}
	if err2 != nil {
		return res, err2
	}
	res.cpu = after - before
	text := string(out)
	m := reCompleted.FindStringSubmatch(text)
	if m == nil {
		return res, fmt.Errorf("dnsperf output without a query count:\n%s", text)
	}
	res.completed, _ = strconv.Atoi(m[1])
	if m := reQPS.FindStringSubmatch(text); m != nil {
		res.qps, _ = strconv.ParseFloat(m[1], 64)
	}
	if m := reAvg.FindStringSubmatch(text); m != nil {
		res.avgLat, _ = strconv.ParseFloat(m[1], 64)
	}
	if qps > 0 {
		// -v lines: "> NOERROR name A 0.000071"; the last field is the
		// latency in seconds.
		for line := range strings.Lines(text) {
			if !strings.HasPrefix(line, "> ") {
				continue
			}
			f := strings.Fields(line)
			if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
				res.lats = append(res.lats, v)
			}
		}
		if len(res.lats) == 0 {
			return res, fmt.Errorf("dnsperf -v printed no latencies:\n%.2000s", text)
		}
	}
	if res.completed == 0 {
		return res, fmt.Errorf("no query completed:\n%s", text)
	}
	return res, nil
}

// measureRT is a fixed-rate latency run with the server (every thread) and
// dnsperf at real-time priority when cfg.chrt is set: at 10k QPS they use
// a few percent of a core, so this starves nothing, and the p99 then
// measures the servers rather than the other processes on the machine.
func measureRT(cfg *runConfig, c *child, file string) (perfResult, error) {
	if cfg.chrt != "" {
		pid := strconv.Itoa(c.cmd.Process.Pid)
		if out, err := exec.Command(cfg.chrt, "-a", "-f", "-p", "10", pid).CombinedOutput(); err != nil {
			return perfResult{}, fmt.Errorf("chrt: %v: %s", err, out)
		}
		defer exec.Command(cfg.chrt, "-a", "-o", "-p", "0", pid).Run()
	}
	return measure(cfg, c, file, cfg.p99Duration, cfg.p99QPS)
}

func percentile(v []float64, p float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

// clockTick is USER_HZ, the unit of utime and stime in /proc/<pid>/stat;
// 100 on every Linux architecture Go supports.
const clockTick = 100

// cpuSeconds returns utime+stime of pid (all its threads).
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; fields restart after its ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, err1 := strconv.ParseUint(f[11], 10, 64)
	st, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return float64(ut+st) / clockTick, nil
}

// rssMB returns VmRSS of pid in MB.
func rssMB(pid int) (float64, error) { return statusMB(pid, "VmRSS:") }

// memReport describes a process's memory: RSS, and the anonymous part
// (heap, stacks) apart from the file-backed pages of the binary, which for
// one binary carrying client-go and gRPC is most of an idle agent's RSS.
func memReport(pid int) string {
	rss, err1 := statusMB(pid, "VmRSS:")
	anon, err2 := statusMB(pid, "RssAnon:")
	file, err3 := statusMB(pid, "RssFile:")
	if err := errors.Join(err1, err2, err3); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("RSS %.1f MB (anonymous %.1f MB, file-backed %.1f MB)", rss, anon, file)
}

// statusMB returns a kB field of /proc/<pid>/status in MB.
func statusMB(pid int, field string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// benchAB measures every scenario on the agent of each binary of cfg.ab
// against the first, an older build: the same table and query files, one
// agent at a time on the server core, each round taking the binaries in
// a rotated order so that a drift of the machine's load lands on all of
// them. The figure is the median over the rounds of each agent's CPU per
// query over the first's in the same round. Bar: 1.05.
func benchAB(cfg *runConfig) error {
	_, up, err := startUpstream(cfg)
	if err != nil {
		return err
	}
	defer up.stop()
	scs := append(scenarios(), forwardedScenario(), mixedScenario())
	files := make([]string, len(scs))
	for i, sc := range scs {
		if files[i], err = writeNames(cfg, sc); err != nil {
			return err
		}
	}
	agents := make([]*child, len(cfg.ab))
	for k, bin := range cfg.ab {
		// Each agent reads its own copy of the table file, so starting
		// one never touches the file another watches.
		acfg := *cfg
		acfg.agent, acfg.dir = bin, filepath.Join(cfg.dir, fmt.Sprintf("agent%d", k))
		if err := os.Mkdir(acfg.dir, 0o755); err != nil {
			return err
		}
		if agents[k], err = startAgent(&acfg, cfg.services, up.addr); err != nil {
			return fmt.Errorf("start agent %s: %w", bin, err)
		}
		defer agents[k].stop()
		for i := range scs {
			// Warm up: the answer cache, and the upstream cache for
			// cache-hit.
			if _, err := measure(cfg, agents[k], files[i], time.Second, 0); err != nil {
				return fmt.Errorf("%s warm-up of %s: %w", scs[i].name, bin, err)
			}
		}
	}
	if cfg.profile != "" {
		if err := profileAgents(cfg, agents, scs, files); err != nil {
			return err
		}
	}
	fmt.Printf("# benchdns -ab: %d services, %d names per scenario, %d rounds of %s runs, agents on cpu %s, dnsperf on cpu %s\n",
		cfg.services, cfg.names, cfg.rounds, cfg.duration, cfg.serverCPU, cfg.clientCPU)
	for k, bin := range cfg.ab {
		fmt.Printf("# agent %d: %s\n", k, bin)
	}
	fmt.Printf("%-16s %-5s %-6s %10s %10s %14s %8s\n", "scenario", "round", "agent", "queries", "QPS", "CPU/query µs", "ratio")
	// cpu[i][k] are the CPU per query of agent k on scenario i, by round.
	cpu := make([][][]float64, len(scs))
	ratios := make([][][]float64, len(scs))
	for i := range scs {
		cpu[i], ratios[i] = make([][]float64, len(agents)), make([][]float64, len(agents))
	}
	for round := 1; round <= cfg.rounds; round++ {
		for i, sc := range scs {
			got := make([]float64, len(agents))
			for j := range agents {
				k := (j + round) % len(agents)
				r, err := measure(cfg, agents[k], files[i], cfg.duration, 0)
				if err != nil {
					return fmt.Errorf("%s on %s: %w", sc.name, cfg.ab[k], err)
				}
				got[k] = r.cpuPerQuery()
				cpu[i][k] = append(cpu[i][k], got[k])
				fmt.Printf("%-16s %-5d %-6d %10d %10.0f %14.2f\n", sc.name, round, k, r.completed, r.qps, 1e6*got[k])
			}
			for k := range agents {
				ratios[i][k] = append(ratios[i][k], got[k]/got[0])
			}
		}
	}
	fmt.Printf("\n# median CPU per query (µs) over %d rounds; ratio = the median of the per-round ratios to agent 0\n\n", cfg.rounds)
	head := "| scenario | agent 0 |"
	rule := "|---|---|"
	for k := 1; k < len(agents); k++ {
		head += fmt.Sprintf(" agent %d | ratio |", k)
		rule += "---|---|"
	}
	fmt.Println(head)
	fmt.Println(rule)
	ok := true
	for i, sc := range scs {
		line := fmt.Sprintf("| %s | %.2f |", sc.name, 1e6*median(cpu[i][0]))
		for k := 1; k < len(agents); k++ {
			m := median(ratios[i][k])
			line += fmt.Sprintf(" %.2f | %.2f %s |", 1e6*median(cpu[i][k]), m, verdict(m <= 1.05))
			ok = ok && m <= 1.05
		}
		fmt.Println(line)
	}
	if !ok {
		fmt.Println("\nsome figures miss the bar of 1.05")
	}
	targets := make([]target, len(agents))
	for k, a := range agents {
		targets[k] = target{name: agentName(k, len(agents)), c: a}
	}
	return runMixed(cfg, targets, up)
}
