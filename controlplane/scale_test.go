package controlplane_test

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/internal/testkit/loadagent"
)

// The scale benchmark runs each control plane replica in a child process
// (this test binary re-executed with benchServerEnv set) and the agents in
// other children (benchFleetEnv), so the control plane's CPU time and
// memory are read apart from the agents that load it.
const (
	benchServerEnv = "MESHDNS_BENCH_SERVER_ENTRIES"
	benchGRPCEnv   = "MESHDNS_BENCH_SERVER_GRPC"
	benchFleetEnv  = "MESHDNS_BENCH_FLEET"
)

// runBenchServer is a control plane child: on the entries folder,
// listening on loopback (gRPC on $MESHDNS_BENCH_SERVER_GRPC when set, so a
// restarted replica comes back at its address), printing its addresses,
// running until stdin closes.
func runBenchServer(dir string) {
	addr := os.Getenv(benchGRPCEnv)
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	gl, err := net.Listen("tcp", addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	al, _ := net.Listen("tcp", "127.0.0.1:0")
	cfg := controlplane.Config{
		Entries: []string{dir}, GRPCListener: gl, AdminListener: al,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if err := benchServerTLS(&cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	cp, err := controlplane.New(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	fmt.Printf("ADDR %s %s\n", gl.Addr(), al.Addr())
	if err := cp.Run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// runBenchFleet is an agents child: "addrs agents first namespaces watch
// sources bundle ramp-nanoseconds" in $MESHDNS_BENCH_FLEET (bundle "-"
// for plaintext);
// events on stdout until stdin closes.
func runBenchFleet(spec string) {
	var addrs, watch, bundle string
	var f loadagent.Fleet
	if _, err := fmt.Sscan(spec, &addrs, &f.Agents, &f.First, &f.Namespaces, &watch, &f.Sources, &bundle, &f.Ramp); err != nil {
		fmt.Fprintln(os.Stderr, "fleet spec:", err)
		os.Exit(1)
	}
	f.Addrs, f.Watch = strings.Split(addrs, ","), watch
	if bundle != "-" {
		confs, err := readBundle(bundle)
		if err != nil || len(confs) != f.Agents {
			fmt.Fprintln(os.Stderr, "fleet certificates:", len(confs), err)
			os.Exit(1)
		}
		f.TLS = func(i int) *tls.Config { return confs[i-f.First] }
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); cancel() }()
	if err := loadagent.RunFleet(ctx, f, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// child is a re-executed test binary.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

func startChild(tb testing.TB, env ...string) *child {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: stdin, out: bufio.NewReaderSize(stdout, 64<<10)}
	tb.Cleanup(c.stop)
	return c
}

// stop ends the child gracefully (stdin closed); idempotent.
func (c *child) stop() {
	c.stdin.Close()
	if c.cmd.ProcessState == nil {
		_ = c.cmd.Wait()
	}
}

// kill ends the child at once, as a crashed or evicted pod.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	c.stop()
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// benchCP is a control plane replica child.
type benchCP struct {
	*child
	grpc, admin string
}

func startBenchCP(tb testing.TB, dir, grpcAddr string, pki *benchPKI) *benchCP {
	tb.Helper()
	env := []string{benchServerEnv + "=" + dir}
	if grpcAddr != "" {
		env = append(env, benchGRPCEnv+"="+grpcAddr)
	}
	if pki != nil {
		env = append(env, benchTLSEnv+"="+pki.dir)
	}
	c := &benchCP{child: startChild(tb, env...)}
	if _, err := fmt.Fscanf(c.out, "ADDR %s %s\n", &c.grpc, &c.admin); err != nil {
		tb.Fatal(err)
	}
	c.admin = "http://" + c.admin
	return c
}

// writeEntries writes n entries spread over files files (entries-<k>.yaml)
// with svc0's address set to changed; it rewrites only the file holding
// svc0 unless all is set. The last file also holds one entry only
// namespace ns-<k> may see for each of scoped namespaces, so each of them
// has a view of its own (namespaces no source names share one).
func writeEntries(tb testing.TB, dir string, n, files, scoped int, changed string, all bool) {
	tb.Helper()
	per := (n + files - 1) / files
	for f := range files {
		if f > 0 && !all {
			break
		}
		var sb strings.Builder
		if f == 0 {
			sb.WriteString("zones: [corp.example]\n")
		}
		sb.WriteString("entries:\n")
		for i := f * per; i < min(n, (f+1)*per); i++ {
			ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
			if i == 0 {
				ip = changed
			}
			fmt.Fprintf(&sb, "  - {hostname: svc%d.corp.example, addresses: [%s], ports: [{name: http, port: 80}]}\n", i, ip)
		}
		if f == files-1 && scoped > 1 {
			for k := range scoped {
				fmt.Fprintf(&sb, "  - {hostname: only.ns-%d.corp.example, addresses: [10.250.%d.%d], namespaces: [ns-%d]}\n", k, k>>8&255, k&255, k)
			}
		}
		file := filepath.Join(dir, fmt.Sprintf("entries-%04d.yaml", f))
		tmp := filepath.Join(dir, ".tmp")
		if err := os.WriteFile(tmp, []byte(sb.String()), 0o644); err != nil {
			tb.Fatal(err)
		}
		if err := os.Rename(tmp, file); err != nil {
			tb.Fatal(err)
		}
	}
}

// cpuTicks returns utime+stime of pid in clock ticks (USER_HZ, 100/s).
func cpuTicks(tb testing.TB, pid int) int64 {
	tb.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return ut + st
}

// scrape returns a metric's value from a child's /metrics, -1 if absent.
func scrape(tb testing.TB, admin, name string) float64 {
	tb.Helper()
	resp, err := http.Get(admin + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return -1
}

// forceGC runs a garbage collection in a child (pprof's heap profile with
// gc=1 collects first).
func forceGC(tb testing.TB, admin string) {
	tb.Helper()
	resp, err := http.Get(admin + "/debug/pprof/heap?gc=1")
	if err != nil {
		tb.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
}

func rssBytes(tb testing.TB, pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024
		}
	}
	return 0
}

// admissions sums the replicas' connection refusals and stream admissions,
// for a benchmark that failed to connect its agents.
func admissions(tb testing.TB, cps []*benchCP) string {
	var sb strings.Builder
	for _, m := range []string{
		`meshdns_controlplane_connections_refused_total{reason="peer"}`,
		`meshdns_controlplane_connections_refused_total{reason="total"}`,
		`meshdns_controlplane_stream_admissions_total{method="spiffe",result="ok"}`,
		`meshdns_controlplane_stream_admissions_total{method="insecure",result="ok"}`,
		`meshdns_controlplane_stream_admissions_total{method="none",result="limited"}`,
		`meshdns_controlplane_stream_admissions_total{method="none",result="unauthenticated"}`,
	} {
		v := 0.0
		for _, c := range cps {
			v += max(scrape(tb, c.admin, m), 0)
		}
		fmt.Fprintf(&sb, "%s %.0f; ", m, v)
	}
	return sb.String()
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// fleet is the agents of a benchmark, in one or more children.
type fleet struct {
	children []*child
	events   chan loadagent.Event
}

// fleetSpec describes the agents of a benchmark.
type fleetSpec struct {
	addrs                     []string
	agents, procs, namespaces int
	sources                   int // loopback source addresses; 0: the kernel's
	watch                     string
	ramp                      time.Duration // connects spread over this long
	bundles                   []string      // each child's certificates (benchPKI.bundles); nil: plaintext
}

// split calls f with each child's first agent and agent count.
func (s fleetSpec) split(f func(p, first, n int)) {
	per := (s.agents + s.procs - 1) / s.procs
	for p := range s.procs {
		if n := min(per, s.agents-p*per); n > 0 {
			f(p, p*per, n)
		}
	}
}

func startFleet(tb testing.TB, s fleetSpec) *fleet {
	tb.Helper()
	fl := &fleet{events: make(chan loadagent.Event, 1<<16)}
	s.split(func(p, first, n int) {
		bundle := "-"
		if s.bundles != nil {
			bundle = s.bundles[p]
		}
		c := startChild(tb, fmt.Sprintf("%s=%s %d %d %d %s %d %s %d", benchFleetEnv, strings.Join(s.addrs, ","), n, first, s.namespaces,
			s.watch, s.sources, bundle, int64(s.ramp)))
		fl.children = append(fl.children, c)
		go func() {
			for {
				line, err := c.out.ReadString('\n')
				if err != nil {
					return
				}
				e, err := parseEvent(line)
				if err != nil {
					continue
				}
				fl.events <- e
			}
		}()
	})
	return fl
}

// await reads events until done returns true, failing after timeout with
// what and progress().
func (fl *fleet) await(tb testing.TB, timeout time.Duration, what string, progress func() string, done func(loadagent.Event) bool) {
	tb.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case e := <-fl.events:
			if done(e) {
				return
			}
		case <-deadline:
			tb.Fatalf("%s: not done within %v: %s", what, timeout, progress())
		}
	}
}

// BenchmarkScale: MESHDNS_BENCH_AGENTS (1,000) agent streams, each its own
// connection, in MESHDNS_BENCH_AGENT_PROCS (1) processes, against
// MESHDNS_BENCH_REPLICAS (1) control plane processes serving
// MESHDNS_BENCH_ENTRIES (10,000) entries from MESHDNS_BENCH_FILES (100)
// files; agent i is in namespace ns-<i mod MESHDNS_BENCH_NAMESPACES (1)>
// (one view each) and connects to replica i mod replicas. Each iteration
// rewrites the file holding one entry with that entry changed and waits
// until every agent has applied and ACKed it. Times count from the file
// rename, so they include the file watch settle (20ms) and the registry
// debounce (100ms). With MESHDNS_BENCH_STORM=1 the first replica is then
// killed and restarted at its address (with more replicas its agents move
// to the next one meanwhile), and the benchmark reports how long until
// every agent of it had a table again and what kind.
func BenchmarkScale(b *testing.B) {
	nAgents := envInt("MESHDNS_BENCH_AGENTS", 1000)
	nProcs := envInt("MESHDNS_BENCH_AGENT_PROCS", 1)
	nReplicas := envInt("MESHDNS_BENCH_REPLICAS", 1)
	nEntries := envInt("MESHDNS_BENCH_ENTRIES", 10000)
	nFiles := envInt("MESHDNS_BENCH_FILES", 100)
	nNamespaces := envInt("MESHDNS_BENCH_NAMESPACES", 1)
	// Each agent from an address of its own, as pods are: the control
	// plane bounds the connections of one address (256 by default).
	nSources := envInt("MESHDNS_BENCH_SOURCES", nAgents)
	var pki *benchPKI
	if os.Getenv("MESHDNS_BENCH_TLS") != "" {
		pki = newBenchPKI(b)
	}
	// MESHDNS_BENCH_RAMP spreads the agents' connects over a duration.
	ramp, _ := time.ParseDuration(os.Getenv("MESHDNS_BENCH_RAMP"))
	// Generous bounds that still end a stuck run: ~6s per 1,000 agents.
	bound := 30*time.Second + time.Duration(nAgents)*6*time.Millisecond
	dir := b.TempDir()
	writeEntries(b, dir, nEntries, nFiles, nNamespaces, "10.200.0.0", true)

	cps := make([]*benchCP, nReplicas)
	addrs := make([]string, nReplicas)
	for r := range cps {
		cps[r] = startBenchCP(b, dir, "", pki)
		addrs[r] = cps[r].grpc
	}
	totalTicks := func() (t int64) {
		for _, c := range cps {
			t += cpuTicks(b, c.pid())
		}
		return t
	}
	// The baseline: replicas with their model built, no agent yet.
	time.Sleep(time.Second)
	rss0, heap0, stack0, gr0 := 0.0, 0.0, 0.0, 0.0
	for _, c := range cps {
		rss0 += rssBytes(b, c.pid())
		heap0 += scrape(b, c.admin, "go_memstats_heap_inuse_bytes")
		stack0 += scrape(b, c.admin, "go_memstats_stack_inuse_bytes")
		gr0 += scrape(b, c.admin, "go_goroutines")
	}
	profileIdle(b, cps[0].admin, "0")

	spec := fleetSpec{addrs: addrs, agents: nAgents, procs: nProcs, namespaces: nNamespaces, sources: nSources,
		watch: "svc0.corp.example", ramp: ramp}
	if pki != nil {
		spec.bundles = pki.bundles(b, spec)
	}
	connectStart := time.Now()
	fl := startFleet(b, spec)
	var fullBytes int
	seen := map[int]bool{}
	fl.await(b, bound+ramp, "every agent's first table", func() string {
		return fmt.Sprintf("%d agents had one; %s", len(seen), admissions(b, cps))
	}, func(e loadagent.Event) bool {
		seen[e.Agent] = true
		fullBytes = max(fullBytes, e.Bytes)
		return len(seen) == nAgents
	})
	connectAll := time.Since(connectStart)
	time.Sleep(time.Second) // let the last ACKs and the connect garbage settle
	rss1, heap1, stack1 := 0.0, 0.0, 0.0
	for _, c := range cps {
		rss1 += rssBytes(b, c.pid())
		heap1 += scrape(b, c.admin, "go_memstats_heap_inuse_bytes")
		stack1 += scrape(b, c.admin, "go_memstats_stack_inuse_bytes")
	}
	// The same after three collections, as a replica that has run for a
	// while holds it: the garbage of the connects is gone and goroutine
	// stacks grown while sending full tables have shrunk back (the
	// runtime halves a stack using under a quarter of it at each GC).
	rssGC, heapGC, stackGC, grGC := 0.0, 0.0, 0.0, 0.0
	for _, c := range cps {
		for range 3 {
			forceGC(b, c.admin)
		}
		rssGC += rssBytes(b, c.pid())
		heapGC += scrape(b, c.admin, "go_memstats_heap_inuse_bytes")
		stackGC += scrape(b, c.admin, "go_memstats_stack_inuse_bytes")
		grGC += scrape(b, c.admin, "go_goroutines")
	}
	profileIdle(b, cps[0].admin, "1")

	var lat []time.Duration
	var fanout time.Duration // sum over iterations of last minus first agent
	var deltaBytes, iters int
	var ticks, agentTicks int64
	fleetTicks := func() (t int64) {
		for _, c := range fl.children {
			t += cpuTicks(b, c.pid())
		}
		return t
	}
	heapMax, rssMax := 0.0, 0.0
	marshals0 := scrape(b, cps[0].admin, `meshdns_controlplane_marshals_total{kind="delta"}`)
	stopProfile := profileUpdates(b, cps[0].admin)
	b.ResetTimer()
	for b.Loop() {
		iters++
		ip := fmt.Sprintf("10.200.%d.%d", iters>>8&255, iters&255)
		t0, a0 := totalTicks(), fleetTicks()
		start := time.Now()
		writeEntries(b, dir, nEntries, nFiles, nNamespaces, ip, false)
		first, last := time.Duration(0), time.Duration(0)
		got := map[int]bool{}
		fl.await(b, bound, fmt.Sprintf("iteration %d", iters), func() string {
			return fmt.Sprintf("%d agents had it", len(got))
		}, func(e loadagent.Event) bool {
			if e.Watched != ip || got[e.Agent] {
				return false
			}
			got[e.Agent] = true
			d := e.At.Sub(start)
			lat = append(lat, d)
			if len(got) == 1 {
				first = d
			}
			last = d
			if e.Kind != "delta" {
				b.Errorf("agent got a %s table for a one-entry change", e.Kind)
			}
			deltaBytes = e.Bytes
			return len(got) == nAgents
		})
		fanout += last - first
		// Let the ACKs land before reading the CPU counters.
		time.Sleep(50 * time.Millisecond)
		ticks += totalTicks() - t0
		agentTicks += fleetTicks() - a0
		for _, c := range cps {
			heapMax = max(heapMax, scrape(b, c.admin, "go_memstats_heap_inuse_bytes"))
			rssMax = max(rssMax, rssBytes(b, c.pid()))
		}
	}
	b.StopTimer()
	stopProfile()
	marshals := (scrape(b, cps[0].admin, `meshdns_controlplane_marshals_total{kind="delta"}`) - marshals0) / float64(iters)
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	cpuPerUpdate := float64(ticks) * 10 / float64(iters) // ms
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(deltaBytes), "delta-B/agent")
	b.ReportMetric(float64(fullBytes), "full-B/agent")
	b.ReportMetric(cpuPerUpdate, "cp-cpu-ms/update")
	b.ReportMetric(cpuPerUpdate*1000/float64(nAgents), "cp-cpu-us/agent/update")
	b.ReportMetric(float64(agentTicks)*10/float64(iters), "agents-cpu-ms/update")
	b.ReportMetric(heapMax/(1<<20), "cp-heap-MiB")
	b.ReportMetric(rssMax/(1<<20), "cp-rss-MiB")
	b.ReportMetric((rss1-rss0)/float64(nAgents)/1024, "cp-rss-KiB/agent")
	b.ReportMetric((heap1-heap0)/float64(nAgents)/1024, "cp-heap-KiB/agent")
	b.ReportMetric((stack1-stack0)/float64(nAgents)/1024, "cp-stack-KiB/agent")
	b.ReportMetric((rssGC-rss0)/float64(nAgents)/1024, "cp-gc-rss-KiB/agent")
	b.ReportMetric((heapGC-heap0)/float64(nAgents)/1024, "cp-gc-heap-KiB/agent")
	b.ReportMetric((stackGC-stack0)/float64(nAgents)/1024, "cp-gc-stack-KiB/agent")
	b.ReportMetric((grGC-gr0)/float64(nAgents), "cp-goroutines/agent")
	b.ReportMetric(float64(connectAll.Milliseconds()), "connect-all-ms")
	b.ReportMetric(marshals, "encodings/update")
	b.ReportMetric(float64(fanout.Microseconds())/1000/float64(iters), "first-to-last-ms")
	b.Logf("tls %t, %d source addresses; %d agents (%d processes) in %d namespaces on %d replicas, %d entries in %d files: connect+full table to all %v; "+
		"per update p50 %.1fms p99 %.1fms max %.1fms (first to last agent %.1fms); delta %dB vs full %dB; "+
		"cp cpu %.0fms/update (%.1fus per agent), agents' cpu %.0fms/update; heap %.1fMiB rss %.1fMiB peak; per agent %.1fKiB rss %.1fKiB heap %.1fKiB stacks (after 3 GCs %.1f rss %.1f heap %.1f stacks); %.1f delta encodings per update",
		pki != nil, nSources, nAgents, nProcs, nNamespaces, nReplicas, nEntries, nFiles, connectAll, pct(0.5), pct(0.99), float64(lat[len(lat)-1].Microseconds())/1000,
		float64(fanout.Microseconds())/1000/float64(iters), deltaBytes, fullBytes, cpuPerUpdate, cpuPerUpdate*1000/float64(nAgents), float64(agentTicks)*10/float64(iters),
		heapMax/(1<<20), rssMax/(1<<20), (rss1-rss0)/float64(nAgents)/1024, (heap1-heap0)/float64(nAgents)/1024, (stack1-stack0)/float64(nAgents)/1024,
		(rssGC-rss0)/float64(nAgents)/1024, (heapGC-heap0)/float64(nAgents)/1024, (stackGC-stack0)/float64(nAgents)/1024, marshals)

	if os.Getenv("MESHDNS_BENCH_STORM") != "" {
		benchStorm(b, dir, cps, fl, nAgents, bound, pki)
	}
}

// benchStorm kills the first replica and restarts it at its address; it
// reports how long until every agent that was on it applied a table from
// a replica again, and the kinds of those tables.
func benchStorm(b *testing.B, dir string, cps []*benchCP, fl *fleet, nAgents int, bound time.Duration, pki *benchPKI) {
	victim := cps[0]
	moving := 0
	for i := range nAgents {
		if i%len(cps) == 0 {
			moving++
		}
	}
	drain(fl.events)
	start := time.Now()
	victim.kill()
	var mu sync.Mutex
	rssPeak := 0.0
	restarted := make(chan *benchCP, 1)
	var listening time.Time // when the replacement serves
	go func() {
		// A replacement pod takes a moment to start: agents of a single
		// replica retry meanwhile, those of several move on.
		c := startBenchCP(b, dir, victim.grpc, pki)
		mu.Lock()
		listening = time.Now()
		mu.Unlock()
		restarted <- c
	}()
	var fresh *benchCP
	kinds := map[string]int{}
	got := map[int]bool{}
	peak := time.NewTicker(100 * time.Millisecond)
	defer peak.Stop()
	deadline := time.After(bound)
	for len(got) < moving {
		select {
		case fresh = <-restarted:
			cps[0] = fresh
		case <-peak.C:
			for _, c := range cps[1:] {
				mu.Lock()
				rssPeak = max(rssPeak, rssBytes(b, c.pid()))
				mu.Unlock()
			}
			if fresh != nil {
				rssPeak = max(rssPeak, rssBytes(b, fresh.pid()))
			}
		case e := <-fl.events:
			if e.Agent%len(cps) != 0 || got[e.Agent] {
				continue
			}
			got[e.Agent] = true
			k := e.Kind
			if e.Empty {
				k = "empty-delta"
			}
			kinds[k]++
		case <-deadline:
			b.Fatalf("storm: %d of %d agents had a table again within %v", len(got), moving, bound)
		}
	}
	took := time.Since(start)
	if fresh == nil {
		fresh = <-restarted
		cps[0] = fresh
	}
	mu.Lock()
	restart := listening.Sub(start)
	mu.Unlock()
	b.ReportMetric(float64(took.Milliseconds()), "storm-ms")
	b.ReportMetric(float64(restart.Milliseconds()), "storm-restart-ms")
	b.ReportMetric(float64(kinds["full"]), "storm-full")
	b.ReportMetric(float64(kinds["delta"]+kinds["empty-delta"]), "storm-delta")
	b.ReportMetric(rssPeak/(1<<20), "storm-rss-MiB")
	b.Logf("storm: %d agents of the killed replica had a table again after %v (the replacement listened after %v): %v; peak rss %.1fMiB",
		moving, took, restart, kinds, rssPeak/(1<<20))
}

func drain[T any](c chan T) {
	for {
		select {
		case <-c:
		default:
			return
		}
	}
}
