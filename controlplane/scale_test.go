package controlplane_test

import (
	"bufio"
	"context"
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
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/controlplane"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// The scale benchmark runs the control plane in a child process (this test
// binary re-executed with benchServerEnv set), so its CPU time and memory
// can be read apart from the 1,000 in-process agents that load it.
const benchServerEnv = "MESHDNS_BENCH_SERVER_ENTRIES"

// runBenchServer is the child: a control plane on the entries folder,
// listening on loopback, printing its addresses, running until stdin closes.
func runBenchServer(dir string) {
	gl, _ := net.Listen("tcp", "127.0.0.1:0")
	al, _ := net.Listen("tcp", "127.0.0.1:0")
	cp, err := controlplane.New(controlplane.Config{
		Entries: []string{dir}, GRPCListener: gl, AdminListener: al,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
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

// writeEntries writes n entries spread over files files (entries-<k>.yaml)
// with svc0's address set to changed; it rewrites only the file holding
// svc0 unless all is set.
func writeEntries(tb testing.TB, dir string, n, files int, changed string, all bool) {
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

// applied is one agent's report: it applied (and ACKed) a response; ip is
// svc0's address when the response changed it.
type applied struct {
	ip    string
	at    time.Time
	bytes int
	kind  string
}

// rawCodec lets the bench agents take responses as bytes: 1,000 agents in
// one process decoding a 10,000-name table each would measure the agents
// (and need gigabytes), not the control plane. Deltas are decoded fully.
type rawCodec struct{}

type rawMsg struct{ b []byte }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	b, err := proto.Marshal(v.(proto.Message))
	return mem.BufferSlice{mem.SliceBuffer(b)}, err
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	v.(*rawMsg).b = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

// benchAgent is a minimal agent: take a response, ACK it, report.
func benchAgent(ctx context.Context, addr, ns, pod string, out chan<- applied) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{})),
		// As the agent dials (agent/discovery): static windows, no BDP pings.
		grpc.WithStaticStreamWindowSize(4<<20), grpc.WithStaticConnWindowSize(4<<20))
	if err != nil {
		return err
	}
	defer conn.Close()
	st, err := meshdnsv1.NewNameDiscoveryServiceClient(conn).StreamNameTable(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(&meshdnsv1.StreamNameTableRequest{Identity: &meshdnsv1.AgentIdentity{PodName: pod, Namespace: ns}}); err != nil {
		return err
	}
	for {
		var m rawMsg
		if err := st.RecvMsg(&m); err != nil {
			return err
		}
		var version, nonce, kind, ip string
		for b := m.b; len(b) > 0; {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 || typ != protowire.BytesType {
				return fmt.Errorf("bad response")
			}
			b = b[n:]
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return fmt.Errorf("bad response")
			}
			b = b[n:]
			switch num {
			case 1:
				version = string(v)
			case 2:
				nonce = string(v)
			case 3:
				kind = "full"
			case 4:
				kind = "delta"
				d := &meshdnsv1.NameTableDelta{}
				if err := proto.Unmarshal(v, d); err != nil {
					return err
				}
				if ni, ok := d.GetUpserted()["svc0.corp.example"]; ok {
					ip = ni.GetIps()[0]
				}
			}
		}
		if err := st.Send(&meshdnsv1.StreamNameTableRequest{VersionInfo: version, ResponseNonce: nonce}); err != nil {
			return err
		}
		out <- applied{ip: ip, at: time.Now(), bytes: len(m.b), kind: kind}
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

// scrape returns a metric's value from the child's /metrics.
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

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkScale: MESHDNS_BENCH_AGENTS (1,000) agent streams over loopback
// against one control plane process serving MESHDNS_BENCH_ENTRIES (10,000)
// entries from MESHDNS_BENCH_FILES (100) files, the agents spread over
// MESHDNS_BENCH_NAMESPACES (1) namespaces (one view each). Each iteration
// rewrites the file holding one entry with that entry changed and waits
// until every agent has applied and ACKed it. Times count from the file
// rename, so they include the file watch settle (20ms) and the registry
// debounce (100ms).
func BenchmarkScale(b *testing.B) {
	nAgents := envInt("MESHDNS_BENCH_AGENTS", 1000)
	nEntries := envInt("MESHDNS_BENCH_ENTRIES", 10000)
	nFiles := envInt("MESHDNS_BENCH_FILES", 100)
	nNamespaces := envInt("MESHDNS_BENCH_NAMESPACES", 1)
	dir := b.TempDir()
	writeEntries(b, dir, nEntries, nFiles, "10.200.0.0", true)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), benchServerEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	var grpcAddr, admin string
	if _, err := fmt.Fscanf(bufio.NewReader(stdout), "ADDR %s %s\n", &grpcAddr, &admin); err != nil {
		b.Fatal(err)
	}
	admin = "http://" + admin
	pid := cmd.Process.Pid

	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan applied, nAgents)
	var wg sync.WaitGroup
	connectStart := time.Now()
	for i := range nAgents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = benchAgent(ctx, grpcAddr, fmt.Sprintf("ns-%d", i%nNamespaces), fmt.Sprintf("pod-%d", i), events)
		}()
	}
	defer func() { cancel(); wg.Wait() }()
	var fullBytes int
	for range nAgents {
		select {
		case e := <-events:
			fullBytes = e.bytes
		case <-time.After(60 * time.Second):
			b.Fatal("agents did not all get their first table within 60s")
		}
	}
	connectAll := time.Since(connectStart)

	var lat []time.Duration
	var fanout time.Duration // sum over iterations of last minus first agent
	var deltaBytes, iters int
	var ticks int64
	heapMax, rssMax := 0.0, 0.0
	marshals0 := scrape(b, admin, `meshdns_controlplane_marshals_total{kind="delta"}`)
	stopProfile := profileUpdates(b, admin)
	b.ResetTimer()
	for b.Loop() {
		iters++
		ip := fmt.Sprintf("10.200.%d.%d", iters>>8&255, iters&255)
		t0 := cpuTicks(b, pid)
		start := time.Now()
		writeEntries(b, dir, nEntries, nFiles, ip, false)
		first, last := time.Duration(0), time.Duration(0)
		for got := 0; got < nAgents; {
			select {
			case e := <-events:
				if e.ip != ip {
					continue
				}
				got++
				d := e.at.Sub(start)
				lat = append(lat, d)
				if got == 1 {
					first = d
				}
				last = d
				if e.kind != "delta" {
					b.Errorf("agent got a %s table for a one-entry change", e.kind)
				}
				deltaBytes = e.bytes
			case <-time.After(30 * time.Second):
				b.Fatalf("iteration %d: not all agents updated within 30s", iters)
			}
		}
		fanout += last - first
		// Let the ACKs land before reading the CPU counters.
		time.Sleep(50 * time.Millisecond)
		ticks += cpuTicks(b, pid) - t0
		heapMax = max(heapMax, scrape(b, admin, "go_memstats_heap_inuse_bytes"))
		rssMax = max(rssMax, rssBytes(b, pid))
	}
	b.StopTimer()
	stopProfile()
	marshals := (scrape(b, admin, `meshdns_controlplane_marshals_total{kind="delta"}`) - marshals0) / float64(iters)
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(float64(deltaBytes), "delta-B/agent")
	b.ReportMetric(float64(fullBytes), "full-B/agent")
	b.ReportMetric(float64(ticks)*10/float64(iters), "cp-cpu-ms/update")
	b.ReportMetric(heapMax/(1<<20), "cp-heap-MiB")
	b.ReportMetric(rssMax/(1<<20), "cp-rss-MiB")
	b.ReportMetric(float64(connectAll.Milliseconds()), "connect-all-ms")
	b.ReportMetric(marshals, "encodings/update")
	b.ReportMetric(float64(fanout.Microseconds())/1000/float64(iters), "first-to-last-ms")
	b.Logf("%d agents in %d namespaces, %d entries in %d files: connect+full table to all %v; per update p50 %.1fms p99 %.1fms max %.1fms (first to last agent %.1fms); delta %dB vs full %dB (%.0fx); cp cpu %.0fms/update; heap %.1fMiB rss %.1fMiB; %.1f delta encodings per update for %d agents",
		nAgents, nNamespaces, nEntries, nFiles, connectAll, pct(0.5), pct(0.99), float64(lat[len(lat)-1].Microseconds())/1000, float64(fanout.Microseconds())/1000/float64(iters), deltaBytes, fullBytes,
		float64(fullBytes)/float64(deltaBytes), float64(ticks)*10/float64(iters), heapMax/(1<<20), rssMax/(1<<20), marshals, nAgents)
}

// profileUpdates, when MESHDNS_BENCH_PROFILE names a folder, saves the
// control plane's CPU profile of the first MESHDNS_BENCH_PROFILE_SECONDS
// (10) of the update loop (cpu.pprof) and its allocations before and after
// the loop (allocs-0.pprof, allocs-1.pprof: compare with pprof -base).
// The returned function waits for the profile.
func profileUpdates(tb testing.TB, admin string) func() {
	dir := os.Getenv("MESHDNS_BENCH_PROFILE")
	if dir == "" {
		return func() {}
	}
	save := func(path, name string) {
		resp, err := http.Get(admin + path)
		if err != nil {
			tb.Error(err)
			return
		}
		defer resp.Body.Close()
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			tb.Error(err)
			return
		}
		defer f.Close()
		_, _ = io.Copy(f, resp.Body)
	}
	save("/debug/pprof/allocs", "allocs-0.pprof")
	done := make(chan struct{})
	go func() {
		defer close(done)
		save(fmt.Sprintf("/debug/pprof/profile?seconds=%d", envInt("MESHDNS_BENCH_PROFILE_SECONDS", 10)), "cpu.pprof")
	}()
	return func() {
		<-done
		save("/debug/pprof/allocs", "allocs-1.pprof")
	}
}
