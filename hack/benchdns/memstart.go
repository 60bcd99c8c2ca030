package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// The start benchmark (`benchdns starts`): agents started again and again
// on the same tables, interleaved (agent A, agent B, A, B, ...), so that
// the load of a shared machine falls on each alike. Each start is measured
// by the CPU time of the process from exec to /healthz/ready (utime+stime,
// every thread), the wall time to ready, and the VmHWM and RSS a moment
// after (the start's peak); the medians over the rounds are printed per
// agent, source and shape, and the ratio of each agent to the first.

// startsConfig is the configuration of one run of starts.
type startsConfig struct {
	agents   []namedAgent
	sizes    []int
	shapes   []string
	sources  []string // "file", "stream"
	rounds   int
	settle   time.Duration
	memLimit string
	dir      string
}

// namedAgent is an agent's command line (binary and subcommand) under a
// short name for the table.
type namedAgent struct {
	name string
	argv []string
}

// startSample is one start.
type startSample struct {
	cpu, wall time.Duration
	peak, rss float64 // MB
}

func runStarts(args []string) error {
	var cfg startsConfig
	fs := flag.NewFlagSet("starts", flag.ExitOnError)
	agents := fs.String("agents", "agent=bin/meshdns-agent", "agents to compare, name=binary, comma-separated (the command agent is added)")
	sizes := fs.String("sizes", "100000", "table sizes, comma-separated")
	shapes := fs.String("shapes", "cluster,plain", "table shapes (plain, cluster; see memory)")
	sources := fs.String("sources", "file,stream", "where the table comes from: file (--nametable-file), stream (a control plane sending it full; the agent with an empty --state-dir in /dev/shm)")
	fs.IntVar(&cfg.rounds, "rounds", 5, "starts of every agent per table and source")
	fs.DurationVar(&cfg.settle, "settle", time.Second, "wait after ready before reading the peak and the RSS")
	fs.StringVar(&cfg.memLimit, "gomemlimit", "128MiB", "GOMEMLIMIT of the agents (the injected sidecar's)")
	_ = fs.Parse(args)
	for a := range strings.SplitSeq(*agents, ",") {
		name, bin, ok := strings.Cut(a, "=")
		if !ok || bin == "" {
			return fmt.Errorf("-agents: %q is not name=binary", a)
		}
		cfg.agents = append(cfg.agents, namedAgent{name: name, argv: []string{bin, "agent"}})
	}
	for s := range strings.SplitSeq(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-sizes: bad size %q", s)
		}
		cfg.sizes = append(cfg.sizes, n)
	}
	for s := range strings.SplitSeq(*shapes, ",") {
		if s != shapePlain && s != shapeCluster {
			return fmt.Errorf("-shapes: unknown shape %q", s)
		}
		cfg.shapes = append(cfg.shapes, s)
	}
	for s := range strings.SplitSeq(*sources, ",") {
		if s != "file" && s != "stream" {
			return fmt.Errorf("-sources: unknown source %q", s)
		}
		cfg.sources = append(cfg.sources, s)
	}
	var err error
	if cfg.dir, err = os.MkdirTemp("", "benchstarts"); err != nil {
		return err
	}
	defer os.RemoveAll(cfg.dir)
	return benchStarts(&cfg)
}

// plainTable is the plain table of n names as a NameTable, for the stream.
func plainTable(n int) *meshdnsv1.NameTable {
	nt := &meshdnsv1.NameTable{Table: make(map[string]*meshdnsv1.NameInfo, n), AuthoritativeZones: []string{"cluster.local"}}
	for i := range n {
		nt.Table[memName(i)] = &meshdnsv1.NameInfo{Ips: []string{memAddr(i, 0)}}
	}
	return nt
}

func benchStarts(cfg *startsConfig) error {
	resolv := filepath.Join(cfg.dir, "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.1\nsearch ns-0.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"), 0o644); err != nil {
		return err
	}
	fmt.Printf("# benchdns starts: %d rounds, agents interleaved; cpu = utime+stime from exec to /healthz/ready; peak = VmHWM %s after ready; GOMEMLIMIT %q\n",
		cfg.rounds, cfg.settle, cfg.memLimit)
	fmt.Println("| agent | shape | source | names | cpu s | wall s | peak MB | rss MB | cpu / first | wall / first |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, n := range cfg.sizes {
		for _, shape := range cfg.shapes {
			for _, source := range cfg.sources {
				if err := startsOf(cfg, n, shape, source, resolv); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// startsOf runs the rounds of one table and source and prints a row per
// agent.
func startsOf(cfg *startsConfig, n int, shape, source, resolv string) error {
	var extra []string
	switch source {
	case "file":
		var path string
		var err error
		if shape == shapeCluster {
			path, err = writeClusterTable(cfg.dir, n, 0)
		} else {
			path, err = writeMemTable(cfg.dir, n, 0)
		}
		if err != nil {
			return err
		}
		extra = []string{"--nametable-file", path}
	case "stream":
		t := plainTable(n)
		if shape == shapeCluster {
			t = clusterTable(n, 0)
		}
		addr, err := freeTCPAddr()
		if err != nil {
			return err
		}
		ts, err := startTableServer(addr, t)
		if err != nil {
			return err
		}
		defer ts.stop()
		extra = []string{"--control-plane", addr}
	}
	extra = append(extra, "--resolv-conf", resolv)
	samples := make([][]startSample, len(cfg.agents))
	for range cfg.rounds {
		for i, a := range cfg.agents {
			s, err := oneStart(cfg, a, extra, source == "stream")
			if err != nil {
				return fmt.Errorf("%s, %s from the %s: %w", a.name, shape, source, err)
			}
			samples[i] = append(samples[i], s)
		}
	}
	var first startSample
	for i, a := range cfg.agents {
		m := medianStart(samples[i])
		if i == 0 {
			first = m
		}
		fmt.Printf("| %s | %s | %s | %d | %.3f | %.3f | %.1f | %.1f | %.2f | %.2f |\n", a.name, shape, source, n,
			m.cpu.Seconds(), m.wall.Seconds(), m.peak, m.rss, m.cpu.Seconds()/first.cpu.Seconds(), m.wall.Seconds()/first.wall.Seconds())
	}
	return nil
}

// oneStart starts agent a until ready and measures it. With state, the
// agent gets a state directory of its own, empty, in memory as the
// sidecar's is (the memory benchmark's stream runs).
func oneStart(cfg *startsConfig, a namedAgent, extra []string, state bool) (startSample, error) {
	var s startSample
	if state {
		root := cfg.dir
		if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
			root = "/dev/shm"
		}
		dir, err := os.MkdirTemp(root, "benchstarts-state-")
		if err != nil {
			return s, err
		}
		defer os.RemoveAll(dir)
		extra = append(slices.Clip(extra), "--state-dir", dir)
	}
	mc := &memConfig{agent: a.argv, memLimit: cfg.memLimit}
	p, err := startAgentProc(mc, extra...)
	if err != nil {
		return s, err
	}
	defer p.stop()
	at, err := waitHTTP("http://"+p.admin+"/healthz/ready", 2*time.Minute)
	if err != nil {
		return s, err
	}
	cpu, err := readCPU(p.pid())
	if err != nil {
		return s, err
	}
	s.cpu, s.wall = cpu, at.Sub(p.start)
	time.Sleep(cfg.settle)
	st, err := readMemStatus(p.pid())
	if err != nil {
		return s, err
	}
	s.peak, s.rss = st.hwm, st.rss
	return s, nil
}

// readCPU reads the utime and stime of pid (every thread, the exited ones
// too) from /proc/<pid>/stat.
func readCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces: fields count
	// from after its closing parenthesis (field 3 is the state).
	i := strings.LastIndexByte(string(b), ')')
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	var ticks int64
	for _, v := range f[11:13] { // utime, stime: fields 14 and 15
		t, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += t
	}
	// USER_HZ is 100 on every Linux the benchmark runs on.
	return time.Duration(ticks) * 10 * time.Millisecond, nil
}

// medianStart is the median of each figure of ss, taken separately.
func medianStart(ss []startSample) startSample {
	med := func(f func(startSample) float64) float64 {
		v := make([]float64, len(ss))
		for i, s := range ss {
			v[i] = f(s)
		}
		slices.Sort(v)
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return startSample{
		cpu:  time.Duration(med(func(s startSample) float64 { return float64(s.cpu) })),
		wall: time.Duration(med(func(s startSample) float64 { return float64(s.wall) })),
		peak: med(func(s startSample) float64 { return s.peak }),
		rss:  med(func(s startSample) float64 { return s.rss }),
	}
}
