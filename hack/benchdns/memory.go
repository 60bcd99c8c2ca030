package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/miekg/dns"
)

// The memory benchmark (`benchdns memory`, `make bench-memory`): the real
// agent binary on n names, from a table file and from a real control plane
// stream, beside Debian's dnsmasq on the same names from a hosts file. Each
// row is one event of one process: a start (ready time, RSS idle, RSS
// steady after answering every name once, the anonymous/file split, and
// VmHWM, the peak of the load) or a replacement of the table (a new file,
// a delta, a full table from the stream, a restart from the state
// directory resumed with a delta; dnsmasq: a new hosts file and SIGHUP),
// whose peak is read after resetting VmHWM (/proc/<pid>/clear_refs) just
// before it. Every row prints its peak over the process's steady RSS.

type memConfig struct {
	sizes     []int
	shapes    []string // shapePlain, shapeCluster
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
	shapes := fs.String("shapes", "plain,cluster", "table shapes: plain (one A per name) and cluster (Kubernetes Services: ports, headless, ExternalName)")
	_ = fs.Parse(args)
	for s := range strings.SplitSeq(*shapes, ",") {
		if s != shapePlain && s != shapeCluster {
			return fmt.Errorf("-shapes: unknown shape %q", s)
		}
		cfg.shapes = append(cfg.shapes, s)
	}
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

// memRow is one event (a start or a replacement) of one server on one
// table.
type memRow struct {
	server, event string
	names         int
	replacement   bool
	// ready: start to ready (/healthz/ready, or the last name answering);
	// for a replacement, the change to the first answer from the new table.
	ready time.Duration
	// answers: start to the last name answering from the table (for a
	// replacement: the same as ready).
	answers time.Duration
	// idle: -settle after ready (after a replacement: after it); steady:
	// the process after answering every name once (for a replacement, the
	// steady reading before it).
	idle, steady memStatus
	peak         float64 // VmHWM over the event (a start: up to idle), MB
	// servePeak is the VmHWM while every name was asked once (reset
	// before), MB: the garbage of packing first answers, not of a load.
	servePeak float64
}

// memStatus is a reading of /proc/<pid>/status, in MB.
type memStatus struct {
	rss, hwm, anon, file float64
}

// resetPeak resets the process's VmHWM to its current RSS (proc(5),
// clear_refs 5), so the next reading is the peak of what follows.
func resetPeak(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
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
	fmt.Printf("# benchdns memory: names svc-N.ns-(N%%100).svc.cluster.local, one A each (plain) or Kubernetes Services (cluster: 85%% ClusterIP with 1-2 named ports, 10%% headless with 3-10 endpoints, 5%% ExternalName); %s\n", strings.Join(cfg.agent, " "))
	fmt.Printf("# start rows: answers = start to the last name answering from the table; ready = start to /healthz/ready (dnsmasq: answers); idle = %s after ready; peak = VmHWM then (the load); steady = %s after dnsperf asked every name once; peak serving = VmHWM over that (reset before)\n", cfg.settle, cfg.steady)
	fmt.Printf("# replacement rows: ready = change to the first answer from the new table; idle = %s after; peak = VmHWM since just before the change; peak/steady over the steady RSS before it\n", cfg.settle)
	var rows []memRow
	add := func(rs ...memRow) {
		for _, r := range rs {
			printMemRow(r)
		}
		rows = append(rows, rs...)
	}
	for _, n := range cfg.sizes {
		files, err := newMemFiles(cfg.dir, n)
		if err != nil {
			return err
		}
		for _, shape := range cfg.shapes {
			if shape != shapeCluster {
				continue
			}
			cf := files
			if cf.queries, err = writeClusterQueries(cfg.dir, n); err != nil {
				return err
			}
			rs, err := memAgentFileShaped(cfg, n, cf, writeClusterTable, " (cluster)")
			add(rs...)
			if err != nil {
				return fmt.Errorf("agent, file, cluster, %d names: %w", n, err)
			}
			if cfg.meshdns != "" {
				rs, err := memAgentClusterStream(cfg, n, cf)
				add(rs...)
				if err != nil {
					return fmt.Errorf("agent, stream, cluster, %d names: %w", n, err)
				}
			}
		}
		if !slices.Contains(cfg.shapes, shapePlain) {
			continue
		}
		rs, err := memAgentFile(cfg, n, files)
		add(rs...)
		if err != nil {
			return fmt.Errorf("agent, file, %d names: %w", n, err)
		}
		if cfg.meshdns != "" {
			rs, err := memAgentStream(cfg, n, files)
			add(rs...)
			if err != nil {
				return fmt.Errorf("agent, stream, %d names: %w", n, err)
			}
		}
		if cfg.dnsmasq != "" {
			rs, err := memDnsmasq(cfg, n, files)
			add(rs...)
			if err != nil {
				return fmt.Errorf("dnsmasq, %d names: %w", n, err)
			}
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
	admin, err := freeTCPAddr()
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
	// Both at once: a restored table answers before the stream makes the
	// agent ready.
	type result struct {
		at  time.Time
		err error
	}
	answered := make(chan result, 1)
	go func() {
		at, err := waitAnswer(p.dnsAddr, memName(r.names-1), memAddr(r.names-1, 0), 2*time.Minute)
		answered <- result{at, err}
	}()
	if p.admin != "" {
		at, err := waitHTTP("http://"+p.admin+"/healthz/ready", 2*time.Minute)
		if err != nil {
			<-answered
			return err
		}
		r.ready = at.Sub(p.start)
	}
	res := <-answered
	if res.err != nil {
		return res.err
	}
	at := res.at
	var err error
	r.answers = at.Sub(p.start)
	if p.admin == "" {
		r.ready = r.answers
	}
	time.Sleep(cfg.settle)
	if r.idle, err = readMemStatus(p.pid()); err != nil {
		return err
	}
	r.peak = r.idle.hwm
	if err := resetPeak(p.pid()); err != nil {
		return err
	}
	if err := askAll(cfg, p.dnsAddr, files.queries, r.names); err != nil {
		return err
	}
	time.Sleep(cfg.steady)
	r.steady, err = readMemStatus(p.pid())
	r.servePeak = r.steady.hwm
	return err
}

func (p *memProc) pid() int { return p.cmd.Process.Pid }

// replace measures one replacement of p's table: change makes it, and the
// replacement is served once name answers want.
func replace(cfg *memConfig, p *memProc, base memRow, event string, change func() error, name, want string) (memRow, error) {
	r := memRow{server: base.server, event: event, names: base.names, replacement: true, steady: base.steady}
	if err := resetPeak(p.pid()); err != nil {
		return r, err
	}
	start := time.Now()
	if err := change(); err != nil {
		return r, err
	}
	at, err := waitAnswer(p.dnsAddr, name, want, time.Minute)
	if err != nil {
		return r, err
	}
	r.ready = at.Sub(start)
	r.answers = r.ready
	time.Sleep(cfg.settle)
	if r.idle, err = readMemStatus(p.pid()); err != nil {
		return r, err
	}
	r.peak = r.idle.hwm
	return r, nil
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

// memAgentFile measures the agent on a table file: the start, then a new
// file with 1% of the addresses changed, then one with all of them.
func memAgentFile(cfg *memConfig, n int, files memFiles) ([]memRow, error) {
	return memAgentFileShaped(cfg, n, files, writeMemTable, "")
}

// memAgentFileShaped is memAgentFile on the table write writes; suffix
// names the shape in the events.
func memAgentFileShaped(cfg *memConfig, n int, files memFiles, write func(dir string, n, changed int) (string, error), suffix string) ([]memRow, error) {
	r := memRow{server: "meshdns agent", event: "start: file" + suffix, names: n}
	table, err := write(cfg.dir, n, 0)
	if err != nil {
		return nil, err
	}
	p, err := startAgentProc(cfg, "--nametable-file", table, "--resolv-conf", files.resolv)
	if err != nil {
		return nil, err
	}
	defer p.stop()
	if err := readyAndMeasure(cfg, p, &r, files); err != nil {
		return nil, err
	}
	rows := []memRow{r}
	pct := max(1, n/100)
	for _, change := range []struct {
		event   string
		changed int
	}{
		{event: "new file, 1% changed" + suffix, changed: pct},
		{event: "new file, all changed" + suffix, changed: n},
	} {
		rr, err := replace(cfg, p, r, change.event, func() error {
			_, err := write(cfg.dir, n, change.changed)
			return err
		}, memName(change.changed-1), memAddr(change.changed-1, change.changed))
		if err != nil {
			return rows, err
		}
		rows = append(rows, rr)
	}
	return rows, nil
}

// memAgentStream measures the agent fed by a real control plane, with a
// state directory: the first full table; a delta changing 1% of the
// names; a full table (a new control plane process on the same address,
// which does not know the agent's version, with 2% changed), and one with
// every name changed (built whole); and a restart
// from the state directory while the names change again (3%), which the
// stream resumes with a delta.
func memAgentStream(cfg *memConfig, n int, files memFiles) ([]memRow, error) {
	entries, err := writeMemEntries(cfg.dir, n, 0)
	if err != nil {
		return nil, err
	}
	grpcAddr, err := freeTCPAddr()
	if err != nil {
		return nil, err
	}
	cp, err := startControlPlane(cfg, grpcAddr, entries)
	if err != nil {
		return nil, err
	}
	defer func() { cp.stop() }()
	// The injected sidecar's state dir is an in-memory emptyDir: tmpfs
	// here too where there is one, so an fsync costs what it costs there.
	stateRoot := cfg.dir
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		stateRoot = "/dev/shm"
	}
	state, err := os.MkdirTemp(stateRoot, fmt.Sprintf("benchmem-state-%d-", n))
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(state)
	agentArgs := []string{"--control-plane", grpcAddr, "--state-dir", state, "--resolv-conf", files.resolv}

	var rows []memRow
	r := memRow{server: "meshdns agent", event: "start: stream", names: n}
	p, err := startAgentProc(cfg, agentArgs...)
	if err != nil {
		return nil, err
	}
	err = func() error {
		defer p.stop()
		if err := readyAndMeasure(cfg, p, &r, files); err != nil {
			return err
		}
		rows = append(rows, r)
		// The state file is what the sidecar's in-memory state dir must
		// hold, twice during an update (the pending file beside it).
		if fi, err := os.Stat(filepath.Join(state, "nametable.pb")); err == nil {
			fmt.Printf("state file at %d names: %d bytes (%.0f KB per 10k names)\n", n, fi.Size(), float64(fi.Size())*10000/float64(n)/1000)
		}
		pct := func(k int) int { return max(1, n*k/100) }
		rr, err := replace(cfg, p, r, "stream delta 1%", func() error {
			_, err := writeMemEntries(cfg.dir, n, pct(1))
			return err
		}, memName(0), memAddr(0, pct(1)))
		if err != nil {
			return err
		}
		rows = append(rows, rr)
		rr, err = replace(cfg, p, r, "stream full table", func() error {
			cp.stop()
			if _, err := writeMemEntries(cfg.dir, n, pct(2)); err != nil {
				return err
			}
			cp, err = startControlPlane(cfg, grpcAddr, entries)
			return err
		}, memName(pct(2)-1), memAddr(pct(2)-1, pct(2)))
		if err != nil {
			return err
		}
		rows = append(rows, rr)
		// Every address changed, from a new control plane: a change of
		// every name, which the agent builds whole.
		rr, err = replace(cfg, p, r, "stream full table, all changed", func() error {
			cp.stop()
			if _, err := writeMemEntries(cfg.dir, n, n); err != nil {
				return err
			}
			cp, err = startControlPlane(cfg, grpcAddr, entries)
			return err
		}, memName(n-1), memAddr(n-1, n))
		if err != nil {
			return err
		}
		rows = append(rows, rr)
		// Back to the 2% table, unmeasured, so that the restarts below
		// change what they did before this row was added.
		cp.stop()
		if _, err := writeMemEntries(cfg.dir, n, pct(2)); err != nil {
			return err
		}
		if cp, err = startControlPlane(cfg, grpcAddr, entries); err != nil {
			return err
		}
		_, err = waitAnswer(p.dnsAddr, memName(n-1), memAddr(n-1, pct(2)), time.Minute)
		return err
	}()
	if err != nil {
		return rows, err
	}
	// Restarts: the persisted table serves first, then the stream resumes,
	// at the same version (nothing to build), and after the names changed
	// while the agent was down (a delta, built on the restored table).
	for _, restart := range []struct {
		event   string
		changed int
	}{
		{event: "start: state dir, same version", changed: 0},
		{event: "start: state dir + delta 3%", changed: max(1, n*3/100)},
	} {
		if restart.changed > 0 {
			// The control plane takes the change before the agent starts.
			before, err := cpVersions(cp.admin)
			if err != nil {
				return rows, err
			}
			if _, err := writeMemEntries(cfg.dir, n, restart.changed); err != nil {
				return rows, err
			}
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
				v, err := cpVersions(cp.admin)
				if err != nil {
					return rows, err
				}
				if v > before {
					break
				}
				if time.Now().After(deadline) {
					return rows, errors.New("the control plane did not take the changed entries within a minute")
				}
			}
		}
		rs := memRow{server: "meshdns agent", event: restart.event, names: n}
		p, err = startAgentProc(cfg, agentArgs...)
		if err != nil {
			return rows, err
		}
		err = readyAndMeasure(cfg, p, &rs, files)
		p.stop()
		if err != nil {
			return rows, err
		}
		rows = append(rows, rs)
	}
	return rows, nil
}

// startControlPlane starts `meshdns controlplane` serving entries on
// grpcAddr and waits until it is ready.
func startControlPlane(cfg *memConfig, grpcAddr, entries string) (*memProc, error) {
	cpAdmin, err := freeTCPAddr()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(cfg.meshdns, "controlplane", "--insecure-allow-unauthenticated", "--grpc-addr", grpcAddr, "--admin-addr", cpAdmin,
		"--entries", entries, "--log-level", "error", "--debounce", "10ms")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &memProc{cmd: cmd, admin: cpAdmin}
	if _, err := waitHTTP("http://"+cpAdmin+"/healthz/ready", 2*time.Minute); err != nil {
		p.stop()
		return nil, fmt.Errorf("control plane: %w", err)
	}
	return p, nil
}

// cpVersions reads meshdns_controlplane_versions_total from a control
// plane's admin address.
func cpVersions(admin string) (float64, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get("http://" + admin + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "meshdns_controlplane_versions_total "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, errors.New("control plane metrics without meshdns_controlplane_versions_total")
}

// memDnsmasq measures dnsmasq on a hosts file: the start, then a new hosts
// file with every address changed, read again on SIGHUP.
func memDnsmasq(cfg *memConfig, n int, files memFiles) ([]memRow, error) {
	r := memRow{server: "dnsmasq", event: "start: hosts file", names: n}
	addr, err := freeUDPAddr()
	if err != nil {
		return nil, err
	}
	_, port, _ := net.SplitHostPort(addr)
	cmd := exec.Command(cfg.dnsmasq, "--keep-in-foreground", "--conf-file=/dev/null", "--no-resolv", "--no-hosts",
		"--addn-hosts="+files.hosts, "--listen-address=127.0.0.1", "--bind-interfaces", "--port="+port,
		"--pid-file=", "--user=root", "--group=root")
	cmd.Stderr = os.Stderr
	p := &memProc{cmd: cmd, dnsAddr: addr, start: time.Now()}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	defer p.stop()
	if err := readyAndMeasure(cfg, p, &r, files); err != nil {
		return nil, err
	}
	rr, err := replace(cfg, p, r, "new hosts file (SIGHUP)", func() error {
		if _, err := writeMemHostsChanged(cfg.dir, n, n); err != nil {
			return err
		}
		return p.cmd.Process.Signal(syscall.SIGHUP)
	}, memName(n-1), memAddr(n-1, n))
	if err != nil {
		return []memRow{r}, err
	}
	return []memRow{r, rr}, nil
}

func printMemRow(r memRow) {
	fmt.Printf("%-14s %-31s %7d names: ready %6.3fs answers %6.3fs | idle %s | steady %s | peak %.1f (%.2fx steady) serving %.1f\n",
		r.server, r.event, r.names, r.ready.Seconds(), r.answers.Seconds(), r.idle, r.steady, r.peak, r.peak/r.steady.rss, r.servePeak)
}

func (s memStatus) String() string {
	if s == (memStatus{}) {
		return "-"
	}
	return fmt.Sprintf("RSS %.1f (anon %.1f file %.1f)", s.rss, s.anon, s.file)
}

// printMemTable prints the summary as a Markdown table, the form the
// READMEs quote.
func printMemTable(rows []memRow) {
	fmt.Println("| server | event | names | answers / ready | RSS idle (anon + file) | RSS steady (anon + file) | anon B/name | peak (VmHWM) | peak / steady | peak serving every name |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	for _, r := range rows {
		steady, perName := "(before) ", "-"
		if !r.replacement {
			steady = ""
			perName = fmt.Sprintf("%.0f", r.steady.anon*(1<<20)/float64(r.names))
		}
		ready := fmt.Sprintf("%.2f s", r.ready.Seconds())
		if r.answers.Round(10*time.Millisecond) != r.ready.Round(10*time.Millisecond) {
			ready = fmt.Sprintf("%.2f / %.2f s", r.answers.Seconds(), r.ready.Seconds())
		}
		serve := "-"
		if !r.replacement {
			serve = fmt.Sprintf("%.1f MB", r.servePeak)
		}
		fmt.Printf("| %s | %s | %d | %s | %.1f MB (%.1f + %.1f) | %s%.1f MB (%.1f + %.1f) | %s | %.1f MB | %.2f | %s |\n",
			r.server, r.event, r.names, ready, r.idle.rss, r.idle.anon, r.idle.file,
			steady, r.steady.rss, r.steady.anon, r.steady.file, perName, r.peak, r.peak/r.steady.rss, serve)
	}
}
