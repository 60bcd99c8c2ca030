package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// The memory benchmark (`benchdns memory`, `make bench-memory`): the real
// agent binary on n names, from a table file and from a real control plane
// stream, beside Debian's dnsmasq on the same names from a hosts file. For
// each it reports when the server was ready, its RSS idle and after
// answering every name once, the anonymous/file split, and VmHWM (the
// peak), also after the table was replaced (a new file, a stream delta).

type memConfig struct {
	sizes     []int
	agent     []string // command line that starts the agent, before its flags
	meshdns   string   // binary whose controlplane command serves the stream
	dnsmasq   string
	dnsperf   string
	settle    time.Duration
	steady    time.Duration
	perfLimit time.Duration
	memLimit  string // GOMEMLIMIT of the agent, or ""
	dir       string
}

func runMemory(args []string) error {
	var cfg memConfig
	fs := flag.NewFlagSet("memory", flag.ExitOnError)
	sizes := fs.String("sizes", "1000,10000,100000", "table sizes (names), comma-separated")
	agent := fs.String("agent", "bin/meshdns-agent agent", "command line of the agent (binary and subcommand)")
	fs.StringVar(&cfg.meshdns, "controlplane", "bin/meshdns", "meshdns binary that runs the control plane (empty: skip the stream)")
	fs.StringVar(&cfg.dnsmasq, "dnsmasq", "dnsmasq", "dnsmasq binary (empty: skip it)")
	fs.DurationVar(&cfg.settle, "settle", 2*time.Second, "wait after ready (and after a replacement) before reading memory")
	fs.DurationVar(&cfg.steady, "steady", 12*time.Second, "wait after dnsperf before reading the steady memory (the agent looks for memory to release every 10s)")
	fs.DurationVar(&cfg.perfLimit, "perf-limit", 60*time.Second, "bound on the dnsperf run over every name")
	fs.StringVar(&cfg.memLimit, "gomemlimit", "", "GOMEMLIMIT given to the agent (default: none, as the sidecar without a limit)")
	_ = fs.Parse(args)
	for s := range strings.SplitSeq(*sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return fmt.Errorf("-sizes: bad size %q", s)
		}
		cfg.sizes = append(cfg.sizes, n)
	}
	cfg.agent = strings.Fields(*agent)
	if len(cfg.agent) == 0 {
		return errors.New("-agent is empty")
	}
	var err error
	if cfg.dnsperf, err = exec.LookPath("dnsperf"); err != nil {
		return errors.New("dnsperf not found (hack/deps.sh installs it)")
	}
	if cfg.dnsmasq != "" {
		if cfg.dnsmasq, err = exec.LookPath(cfg.dnsmasq); err != nil {
			return errors.New("dnsmasq not found (hack/deps.sh installs dnsmasq-base; -dnsmasq \"\" skips it)")
		}
	}
	if cfg.dir, err = os.MkdirTemp("", "benchmem"); err != nil {
		return err
	}
	defer os.RemoveAll(cfg.dir)
	return benchMemory(&cfg)
}

// memRow is one server on one table.
type memRow struct {
	server, source string
	names          int
	ready          time.Duration // start to ready (/healthz/ready, or the last name answering)
	answers        time.Duration // start to the last name answering from the table
	idle, after    memStatus
	replaced       memStatus // after a replacement; zero when none
	replaceKind    string
}

// memStatus is a reading of /proc/<pid>/status, in MB.
type memStatus struct {
	rss, hwm, anon, file float64
}

func readMemStatus(pid int) (memStatus, error) {
	var s memStatus
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	fields := map[string]*float64{"VmRSS:": &s.rss, "VmHWM:": &s.hwm, "RssAnon:": &s.anon, "RssFile:": &s.file}
	for line := range strings.Lines(string(b)) {
		for k, p := range fields {
			if v, ok := strings.CutPrefix(line, k); ok {
				kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
				if err != nil {
					return s, fmt.Errorf("/proc/%d/status %s: %w", pid, k, err)
				}
				*p = kb / 1024
			}
		}
	}
	return s, nil
}

func benchMemory(cfg *memConfig) error {
	fmt.Printf("# benchdns memory: names svc-N.ns-(N%%100).svc.cluster.local, one A each; %s\n", strings.Join(cfg.agent, " "))
	fmt.Printf("# ready: start to /healthz/ready (dnsmasq: to the last name answering); answers: start to the last name answering\n")
	fmt.Printf("# idle: %s after ready; after: %s after dnsperf asked every name once; replaced: %s after a new table was served\n", cfg.settle, cfg.steady, cfg.settle)
	var rows []memRow
	for _, n := range cfg.sizes {
		files, err := newMemFiles(cfg.dir, n)
		if err != nil {
			return err
		}
		r, err := memAgentFile(cfg, n, files)
		if err != nil {
			return fmt.Errorf("agent, file, %d names: %w", n, err)
		}
		rows = append(rows, r)
		printMemRow(r)
		if cfg.meshdns != "" {
			rs, err := memAgentStream(cfg, n, files)
			if err != nil {
				return fmt.Errorf("agent, stream, %d names: %w", n, err)
			}
			for _, r := range rs {
				printMemRow(r)
			}
			rows = append(rows, rs...)
		}
		if cfg.dnsmasq != "" {
			r, err := memDnsmasq(cfg, n, files)
			if err != nil {
				return fmt.Errorf("dnsmasq, %d names: %w", n, err)
			}
			rows = append(rows, r)
			printMemRow(r)
		}
	}
	fmt.Println()
	printMemTable(rows)
	return nil
}

type memFiles struct {
	table, entries, hosts, queries, resolv string
}

func newMemFiles(dir string, n int) (memFiles, error) {
	var f memFiles
	var errs [4]error
	f.table, errs[0] = writeMemTable(dir, n, 0)
	f.entries, errs[1] = writeMemEntries(dir, n, 0)
	f.hosts, errs[2] = writeMemHosts(dir, n)
	f.queries, errs[3] = writeMemQueries(dir, n)
	if err := errors.Join(errs[:]...); err != nil {
		return f, err
	}
	f.resolv = filepath.Join(dir, "resolv.conf")
	return f, os.WriteFile(f.resolv, []byte("nameserver 127.0.0.1\nsearch ns-0.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n"), 0o644)
}

// memProc is a server process under measurement.
type memProc struct {
	cmd            *exec.Cmd
	start          time.Time
	dnsAddr, admin string
}

func (p *memProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

func startAgentProc(cfg *memConfig, extra ...string) (*memProc, error) {
	dnsAddr, err := freeUDPAddr()
	if err != nil {
		return nil, err
	}
	admin, err := freeUDPAddr()
	if err != nil {
		return nil, err
	}
	args := append(append([]string(nil), cfg.agent[1:]...), "--dns-addr", dnsAddr, "--admin-addr", admin,
		"--namespace", "ns-0", "--pod-name", "bench", "--upstream", "127.0.0.1:9", "--log-level", "warn")
	args = append(args, extra...)
	cmd := exec.Command(cfg.agent[0], args...)
	cmd.Stderr = os.Stderr
	if cfg.memLimit != "" {
		cmd.Env = append(os.Environ(), "GOMEMLIMIT="+cfg.memLimit)
	}
	p := &memProc{cmd: cmd, dnsAddr: dnsAddr, admin: admin, start: time.Now()}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

// waitHTTP polls url until it answers 200 and returns when that was.
func waitHTTP(url string, limit time.Duration) (time.Time, error) {
	client := &http.Client{Timeout: 200 * time.Millisecond}
	deadline := time.Now().Add(limit)
	for {
		resp, err := client.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return time.Now(), nil
			}
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s not ready after %s (last: %v)", url, limit, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitAnswer polls addr until name answers A want, and returns when.
func waitAnswer(addr, name, want string, limit time.Duration) (time.Time, error) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), dns.TypeA)
	client := &dns.Client{Timeout: 200 * time.Millisecond}
	deadline := time.Now().Add(limit)
	var last string
	for {
		r, _, err := client.Exchange(q, addr)
		if err == nil && len(r.Answer) > 0 {
			if a, ok := r.Answer[len(r.Answer)-1].(*dns.A); ok && a.A.String() == want {
				return time.Now(), nil
			}
		}
		if err != nil {
			last = err.Error()
		} else {
			last = r.String()
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("%s A from %s is not %s after %s (last: %s)", name, addr, want, limit, last)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readyAndMeasure waits for p to be ready and to answer the last name, then
// reads its memory idle and after dnsperf asked every name once.
func readyAndMeasure(cfg *memConfig, p *memProc, r *memRow, files memFiles) error {
	if p.admin != "" {
		at, err := waitHTTP("http://"+p.admin+"/healthz/ready", 2*time.Minute)
		if err != nil {
			return err
		}
		r.ready = at.Sub(p.start)
	}
	at, err := waitAnswer(p.dnsAddr, memName(r.names-1), memAddr(r.names-1, 0), 2*time.Minute)
	if err != nil {
		return err
	}
	r.answers = at.Sub(p.start)
	if p.admin == "" {
		r.ready = r.answers
	}
	time.Sleep(cfg.settle)
	if r.idle, err = readMemStatus(p.cmd.Process.Pid); err != nil {
		return err
	}
	if err := askAll(cfg, p.dnsAddr, files.queries, r.names); err != nil {
		return err
	}
	time.Sleep(cfg.steady)
	r.after, err = readMemStatus(p.cmd.Process.Pid)
	return err
}

// askAll runs dnsperf over every name once and checks they all answered.
func askAll(cfg *memConfig, addr, queries string, n int) error {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	secs := strconv.Itoa(max(1, int(cfg.perfLimit/time.Second)))
	ctx, cancel := context.WithTimeout(context.Background(), cfg.perfLimit+30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cfg.dnsperf, "-s", host, "-p", port, "-d", queries, "-n", "1", "-l", secs,
		"-c", "1", "-T", "1", "-q", "100", "-t", "2").Output()
	if err != nil {
		return fmt.Errorf("dnsperf: %w", err)
	}
	m := reCompleted.FindStringSubmatch(string(out))
	if m == nil {
		return fmt.Errorf("dnsperf output without a query count:\n%s", out)
	}
	if got, _ := strconv.Atoi(m[1]); got != n {
		return fmt.Errorf("dnsperf completed %d of %d queries:\n%s", got, n, out)
	}
	return nil
}

func memAgentFile(cfg *memConfig, n int, files memFiles) (memRow, error) {
	r := memRow{server: "meshdns agent", source: "file", names: n, replaceKind: "new file"}
	table, err := writeMemTable(cfg.dir, n, 0)
	if err != nil {
		return r, err
	}
	p, err := startAgentProc(cfg, "--nametable-file", table, "--resolv-conf", files.resolv)
	if err != nil {
		return r, err
	}
	defer p.stop()
	if err := readyAndMeasure(cfg, p, &r, files); err != nil {
		return r, err
	}
	// Replace the whole table: every address changes.
	if _, err := writeMemTable(cfg.dir, n, n); err != nil {
		return r, err
	}
	if _, err := waitAnswer(p.dnsAddr, memName(n-1), memAddr(n-1, n), time.Minute); err != nil {
		return r, err
	}
	time.Sleep(cfg.settle)
	r.replaced, err = readMemStatus(p.cmd.Process.Pid)
	return r, err
}

// memAgentStream measures the agent fed by a real control plane: the first
// full table, a delta changing 1% of the names, and a restart from the
// persisted state.
func memAgentStream(cfg *memConfig, n int, files memFiles) ([]memRow, error) {
	entries, err := writeMemEntries(cfg.dir, n, 0)
	if err != nil {
		return nil, err
	}
	grpcAddr, err := freeUDPAddr()
	if err != nil {
		return nil, err
	}
	cpAdmin, err := freeUDPAddr()
	if err != nil {
		return nil, err
	}
	cp := exec.Command(cfg.meshdns, "controlplane", "--insecure-allow-unauthenticated", "--grpc-addr", grpcAddr, "--admin-addr", cpAdmin,
		"--entries", entries, "--log-level", "warn", "--debounce", "10ms")
	cp.Stderr = os.Stderr
	if err := cp.Start(); err != nil {
		return nil, err
	}
	cpProc := &memProc{cmd: cp}
	defer cpProc.stop()
	if _, err := waitHTTP("http://"+cpAdmin+"/healthz/ready", 2*time.Minute); err != nil {
		return nil, fmt.Errorf("control plane: %w", err)
	}
	state := filepath.Join(cfg.dir, fmt.Sprintf("state-%d", n))
	agentArgs := []string{"--control-plane", grpcAddr, "--state-dir", state, "--resolv-conf", files.resolv}

	r := memRow{server: "meshdns agent", source: "stream", names: n, replaceKind: "delta 1%"}
	p, err := startAgentProc(cfg, agentArgs...)
	if err != nil {
		return nil, err
	}
	err = func() error {
		defer p.stop()
		if err := readyAndMeasure(cfg, p, &r, files); err != nil {
			return err
		}
		changed := max(1, n/100)
		if _, err := writeMemEntries(cfg.dir, n, changed); err != nil {
			return err
		}
		if _, err := waitAnswer(p.dnsAddr, memName(0), memAddr(0, changed), time.Minute); err != nil {
			return err
		}
		time.Sleep(cfg.settle)
		r.replaced, err = readMemStatus(p.cmd.Process.Pid)
		return err
	}()
	if err != nil {
		return nil, err
	}
	// A restart: the persisted table serves first, then the stream resumes.
	rs := memRow{server: "meshdns agent", source: "state+stream", names: n}
	p, err = startAgentProc(cfg, agentArgs...)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	if err := readyAndMeasure(cfg, p, &rs, files); err != nil {
		return nil, err
	}
	return []memRow{r, rs}, nil
}

func memDnsmasq(cfg *memConfig, n int, files memFiles) (memRow, error) {
	r := memRow{server: "dnsmasq", source: "hosts", names: n}
	addr, err := freeUDPAddr()
	if err != nil {
		return r, err
	}
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(cfg.dnsmasq, "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
		"--addn-hosts="+files.hosts, "--listen-address=127.0.0.1", "--bind-interfaces", "--port="+port,
		"--pid-file=", "--user=root", "--group=root")
	cmd.Stderr = os.Stderr
	p := &memProc{cmd: cmd, dnsAddr: addr, start: time.Now()}
	if err := cmd.Start(); err != nil {
		return r, err
	}
	defer p.stop()
	return r, readyAndMeasure(cfg, p, &r, files)
}

func printMemRow(r memRow) {
	fmt.Printf("%-14s %-13s %7d names: ready %6.3fs answers %6.3fs | idle %s | after %s | replaced (%s) %s\n",
		r.server, r.source, r.names, r.ready.Seconds(), r.answers.Seconds(), r.idle, r.after, r.replaceKind, r.replaced)
}

func (s memStatus) String() string {
	if s == (memStatus{}) {
		return "-"
	}
	return fmt.Sprintf("RSS %.1f (anon %.1f file %.1f) HWM %.1f", s.rss, s.anon, s.file, s.hwm)
}

// printMemTable prints the summary as a Markdown table, the form the
// READMEs quote.
func printMemTable(rows []memRow) {
	fmt.Println("| server | source | names | ready | RSS idle (anon + file) | RSS after every name (anon + file) | anon B/name | VmHWM | VmHWM after replace | HWM / RSS |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		hwm := r.after.hwm
		repl := "-"
		if r.replaced != (memStatus{}) {
			hwm = r.replaced.hwm
			repl = fmt.Sprintf("%.1f MB (%s)", r.replaced.hwm, r.replaceKind)
		}
		steady := max(r.after.rss, r.replaced.rss)
		fmt.Printf("| %s | %s | %d | %.2f s | %.1f MB (%.1f + %.1f) | %.1f MB (%.1f + %.1f) | %.0f | %.1f MB | %s | %.2f |\n",
			r.server, r.source, r.names, r.ready.Seconds(), r.idle.rss, r.idle.anon, r.idle.file,
			r.after.rss, r.after.anon, r.after.file, r.after.anon*(1<<20)/float64(r.names), r.after.hwm, repl, hwm/steady)
	}
}
