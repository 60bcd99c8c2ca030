package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// faultLoopBaseline, when set to a meshdns binary, runs TestFaultLoop
// against it without --state-dir and only reports the failures: the way
// to measure a build from before the loop held (the figure in README.md).
const faultLoopBaseline = "MESHDNS_FAULTLOOP_BASELINE"

// TestFaultLoop: a real control plane process and a real agent process,
// 200 queries/s over UDP for names of an entries file, while the file turns
// invalid, empty and then disappears, each followed by a SIGKILL and a
// restart of the control plane in that state. Every lookup of a name valid
// before the faults must succeed with its address.
func TestFaultLoop(t *testing.T) {
	bin := buildMeshdns(t)
	baseline := os.Getenv(faultLoopBaseline)
	if baseline != "" {
		bin = baseline
	}
	dir, state := t.TempDir(), t.TempDir()
	file := filepath.Join(dir, "names.yaml")
	const n = 8
	var good strings.Builder
	good.WriteString("zones: [corp.example]\nentries:\n")
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("svc%d.corp.example.", i)
		fmt.Fprintf(&good, "  - {hostname: svc%d.corp.example, addresses: [\"10.7.0.%d\"]}\n", i, i+1)
	}
	testenv.ReplaceFile(t, file, good.String())

	up := startFaultUpstream(t)
	grpcAddr, adminAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	cpArgs := []string{"controlplane", "--insecure-allow-unauthenticated", "--entries", file, "--grpc-addr", grpcAddr, "--admin-addr", adminAddr,
		"--debounce", "20ms", "--log-level", "warn"}
	if baseline == "" {
		cpArgs = append(cpArgs, "--state-dir", state)
	}
	cp := startProcess(t, bin, cpArgs...)
	awaitHTTP(t, "http://"+adminAddr+"/healthz/ready", http.StatusOK)

	resolv := filepath.Join(dir, "resolv.conf")
	testenv.ReplaceFile(t, resolv, "nameserver 127.0.0.1\nsearch team-a.svc.cluster.local\noptions ndots:5\n")
	dnsAddr, agentAdmin := testenv.FreeAddr(t), testenv.FreeAddr(t)
	startProcess(t, bin, "agent", "--control-plane", grpcAddr, "--dns-addr", dnsAddr, "--admin-addr", agentAdmin,
		"--upstream", up, "--resolv-conf", resolv, "--namespace", "team-a", "--pod-name", "client-0",
		"--cache-size", "-1", "--log-level", "warn")
	awaitHTTP(t, "http://"+agentAdmin+"/healthz/ready", http.StatusOK)

	loop := startQueryLoop(t, dnsAddr, names)
	restart := func(t *testing.T) {
		cp.kill(t)
		cp = startProcess(t, bin, cpArgs...)
		if baseline == "" {
			// Ready means it serves again, from the state.
			awaitHTTP(t, "http://"+adminAddr+"/healthz/ready", http.StatusOK)
		}
		time.Sleep(time.Second) // the agent reconnects and takes what it is given
	}
	steps := []struct {
		name  string
		fault func(t *testing.T)
	}{
		{name: "warm up", fault: func(*testing.T) {}},
		{name: "invalid file", fault: func(t *testing.T) {
			testenv.ReplaceFile(t, file, "entries: [{hostname: svc0.corp.example, addresses: [10.7.0]}]\n")
		}},
		{name: "SIGKILL and restart with the invalid file", fault: restart},
		{name: "empty file", fault: func(t *testing.T) { testenv.ReplaceFile(t, file, "") }},
		{name: "SIGKILL and restart with the empty file", fault: restart},
		{name: "file deleted", fault: func(t *testing.T) {
			if err := os.Remove(file); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "SIGKILL and restart without the file", fault: restart},
		{name: "file back", fault: func(t *testing.T) { testenv.ReplaceFile(t, file, good.String()) }},
	}
	for _, s := range steps {
		before := loop.counts()
		s.fault(t)
		time.Sleep(time.Second)
		after := loop.counts()
		t.Logf("%-45s %4d lookups, %3d failed", s.name, after.sent-before.sent, after.failed-before.failed)
	}
	c := loop.stop()
	t.Logf("total: %d lookups, %d failed (%v)", c.sent, c.failed, c.firstErr)
	if c.sent < 1000 {
		t.Errorf("only %d lookups sent; the loop did not run at 200/s", c.sent)
	}
	if baseline != "" {
		return
	}
	if c.failed != 0 {
		t.Errorf("%d of %d lookups of names valid before the faults failed; first: %v", c.failed, c.sent, c.firstErr)
	}
}

// queryLoop asks for the names in turn, 200 a second, each over its own
// UDP socket with a 1s deadline (a resolver's first try), and counts
// lookups that did not get NOERROR with the name's table address.
type queryLoop struct {
	sent, failed atomic.Int64
	timeouts     atomic.Int64 // failed lookups that waited the whole deadline
	mu           sync.Mutex
	firstErr     error       // guarded by mu
	timedOut     []time.Time // guarded by mu: when each timed-out lookup was sent
	cancel       context.CancelFunc
	wg           sync.WaitGroup
}

type loopCounts struct {
	sent, failed int64
	firstErr     error
}

func startQueryLoop(t *testing.T, addr string, names []string) *queryLoop {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &queryLoop{cancel: cancel}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			name, want := names[i%len(names)], fmt.Sprintf("10.7.0.%d", i%len(names)+1)
			l.sent.Add(1)
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				sent := time.Now()
				if err := lookup(addr, name, want); err != nil {
					l.failed.Add(1)
					timeout := false
					if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
						l.timeouts.Add(1)
						timeout = true
					}
					l.mu.Lock()
					if l.firstErr == nil {
						l.firstErr = err
					}
					if timeout {
						l.timedOut = append(l.timedOut, sent)
					}
					l.mu.Unlock()
				}
			}()
		}
	}()
	t.Cleanup(func() { l.stop() })
	return l
}

// timeoutsSentAfter counts the timed-out lookups sent after t.
func (l *queryLoop) timeoutsSentAfter(t time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.timedOut {
		if s.After(t) {
			n++
		}
	}
	return n
}

func (l *queryLoop) counts() loopCounts {
	l.mu.Lock()
	defer l.mu.Unlock()
	return loopCounts{sent: l.sent.Load(), failed: l.failed.Load(), firstErr: l.firstErr}
}

// stop ends the loop, waits for the lookups in flight and returns the
// totals; idempotent.
func (l *queryLoop) stop() loopCounts {
	l.cancel()
	l.wg.Wait()
	return l.counts()
}

func lookup(addr, name, want string) error {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	c := &dns.Client{Net: "udp", Timeout: time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 {
		return fmt.Errorf("%s: %s with %d answers", name, dns.RcodeToString[r.Rcode], len(r.Answer))
	}
	if a, ok := r.Answer[0].(*dns.A); !ok || a.A.String() != want {
		return fmt.Errorf("%s: answer %v, want %s", name, r.Answer[0], want)
	}
	return nil
}

// startFaultUpstream is an upstream on 127.0.0.1:0 that answers SERVFAIL:
// a name the agent forwards instead of answering counts as failed.
func startFaultUpstream(t *testing.T) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetRcode(r, dns.RcodeServerFailure)
		_ = w.WriteMsg(m)
	})}
	testenv.Serve(t, srv)
	return pc.LocalAddr().String()
}

// process is a meshdns process the test started.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// startProcess starts bin with args, its output in the test log on
// failure; it is killed when the test ends.
func startProcess(t testing.TB, bin string, args ...string) *process {
	t.Helper()
	cmd := exec.Command(bin, args...)
	out := &testenv.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.kill(t)
		if t.Failed() {
			t.Logf("%s %s:\n%s", filepath.Base(bin), args[0], out.String())
		}
	})
	return p
}

// kill sends SIGKILL and waits for the process to be gone; idempotent.
func (p *process) kill(t testing.TB) {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
	case <-time.After(cmdTimeout):
		t.Fatalf("pid %d did not exit after SIGKILL", p.cmd.Process.Pid)
	}
}

// awaitHTTP polls url until it answers code.
func awaitHTTP(t testing.TB, url string, code int) {
	t.Helper()
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var got string
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := c.Get(url)
		if err != nil {
			got = err.Error()
		} else {
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == code {
				return
			}
			got = fmt.Sprintf("%d %s", resp.StatusCode, b)
		}
		if time.Now().After(deadline) {
			t.Fatalf("GET %s = %s, want %d", url, got, code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
