package agentcmd

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshdns/meshdns/cmd/internal/safemode"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestSupervisorSafeMode runs a real supervisor (the test-only build of
// testdata/crashagent) through normal -> safe mode -> normal: a good agent
// serves its table; it is killed while the image "turns bad" (every agent
// then exits at start); after three quick crashes the supervisor forwards
// every query to the upstream itself, over UDP and TCP, while it keeps
// trying the agent; once agents start again, one takes the sockets back
// and answers from its table. A client asking all along sees no failure.
func TestSupervisorSafeMode(t *testing.T) {
	up := newTestUpstream(t)
	sv := startSupervisor(t, "--nametable-file", "../../../examples/nametable.json", "--upstream", up.addr)
	waitProbe(t, sv.probe, 200, "ready: table")
	normal := rss(t, sv.cmd.Process.Pid)
	if ip := askA(t, "udp", sv.dns, "web.demo.svc.cluster.local"); ip != "10.96.0.20" {
		t.Fatalf("before: answer %s, want the table's 10.96.0.20", ip)
	}
	q := startQuerier(t, sv.dns)

	if sv.crash(t) != 1 {
		t.Fatal("no agent to kill")
	}
	waitProbe(t, sv.probe, 200, "safe mode: the agent crashed 3 times in a row")
	for _, proto := range []string{"udp", "tcp"} {
		if ip := askA(t, proto, sv.dns, "web.demo.svc.cluster.local"); ip != "192.0.2.1" {
			t.Errorf("safe mode, %s: answer %s, want the upstream's 192.0.2.1 (forwarded)", proto, ip)
		}
	}
	metrics := getBody(t, "http://"+sv.probe+"/metrics")
	for _, want := range []string{"meshdns_agent_safe_mode 1\n", "meshdns_agent_safe_mode_entries_total 1\n"} {
		if !strings.Contains(metrics, want) {
			t.Errorf("safe mode /metrics lacks %q", want)
		}
	}
	safe := rss(t, sv.cmd.Process.Pid)
	// It keeps trying the agent, and serves again after each failed try.
	testenv.Eventually(t, "a fourth crash, in safe mode", 2*time.Minute, func() bool { return sv.crashes() >= 4 })
	waitProbe(t, sv.probe, 200, "safe mode:")

	sv.heal(t)
	testenv.Eventually(t, "the agent answering from its table again", 2*time.Minute, func() bool {
		return askA(t, "udp", sv.dns, "web.demo.svc.cluster.local") == "10.96.0.20"
	})
	after := rss(t, sv.cmd.Process.Pid)
	answered, failed := q.stop()
	if failed > 0 {
		t.Errorf("%d of %d lookups failed across normal -> safe mode -> normal, want none", failed, answered+failed)
	}
	t.Logf("%d lookups, none failed; supervisor RSS (anon/total kB): normal %s, safe mode %s, after %s", answered, normal, safe, after)
}

// TestSupervisorSafeModeRefusesUnderPolicy: the last version in the state
// dir enforces a DNS policy, so safe mode refuses every query at once
// (fail closed, never a timeout), asks no upstream, and is not ready.
func TestSupervisorSafeModeRefusesUnderPolicy(t *testing.T) {
	up := newTestUpstream(t)
	state := t.TempDir()
	writeTestState(t, state, &namewire.AgentSettings{Policy: &namewire.DNSPolicy{
		Mode: namewire.PolicyModeEnforce, OutsideDefault: namewire.PolicyActionDeny, Source: "demo/egress"}})
	sv := startSupervisor(t, "--control-plane", testenv.FreeAddr(t), "--state-dir", state, "--upstream", up.addr)
	sv.crash(t)
	waitProbe(t, sv.probe, 503, "safe mode, refusing every query (the last version enforces a DNS policy (demo/egress))")
	for _, proto := range []string{"udp", "tcp"} {
		m := new(dns.Msg).SetQuestion("example.org.", dns.TypeA)
		r, rtt, err := (&dns.Client{Net: proto, Timeout: 5 * time.Second}).Exchange(m, sv.dns)
		if err != nil {
			t.Fatalf("%s: %v, want REFUSED at once", proto, err)
		}
		if r.Rcode != dns.RcodeRefused {
			t.Errorf("%s: rcode %s, want REFUSED", proto, dns.RcodeToString[r.Rcode])
		}
		t.Logf("%s: REFUSED in %s", proto, rtt)
	}
	if n := up.queries.Load(); n != 0 {
		t.Errorf("the upstream saw %d queries, want none", n)
	}
}

// crashAgentDir holds the crashagent build, removed by TestMain.
var crashAgentDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if crashAgentDir != "" {
		os.RemoveAll(crashAgentDir)
	}
	os.Exit(code)
}

// crashAgentBin builds testdata/crashagent once per test binary.
var crashAgentBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "meshdns-crashagent")
	if err != nil {
		return "", err
	}
	crashAgentDir = dir
	bin := filepath.Join(dir, "meshdns-agent")
	out, err := exec.Command("go", "build", "-o", bin, "./testdata/crashagent").CombinedOutput()
	if err != nil {
		return "", &buildError{err, out}
	}
	return bin, nil
})

type buildError struct {
	err error
	out []byte
}

func (e *buildError) Error() string {
	return "build crashagent: " + e.err.Error() + ": " + string(e.out)
}

// supervisor is a running `agent --supervise` process of crashagent.
type supervisor struct {
	cmd        *exec.Cmd
	dns, probe string
	marker     string // while it exists, every agent started exits
	stderr     *testenv.Buffer
}

func startSupervisor(t *testing.T, args ...string) *supervisor {
	t.Helper()
	bin, err := crashAgentBin()
	if err != nil {
		t.Fatal(err)
	}
	sv := &supervisor{dns: testenv.FreeAddr(t), probe: testenv.FreeAddr(t),
		marker: filepath.Join(t.TempDir(), "crash"), stderr: &testenv.Buffer{}}
	args = append([]string{"agent", "--supervise", "--namespace", "demo", "--resolv-conf", "../../../examples/resolv.conf",
		"--dns-addr", sv.dns, "--admin-addr", testenv.FreeAddr(t), "--probe-addr", sv.probe, "--log-level", "warn"}, args...)
	sv.cmd = exec.Command(bin, args...)
	sv.cmd.Env = append(os.Environ(), "CRASHAGENT_WHILE="+sv.marker)
	sv.cmd.Stderr = sv.stderr
	if err := sv.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		sv.cmd.Process.Signal(syscall.SIGTERM)
		sv.cmd.Wait()
		if t.Failed() {
			t.Logf("supervisor's stderr:\n%s", sv.stderr.String())
		}
	})
	return sv
}

// crash makes every agent exit at start from now on, and kills the one
// running, if any (found as the supervisor's child); it returns how many
// it killed.
func (sv *supervisor) crash(t *testing.T) int {
	t.Helper()
	if err := os.WriteFile(sv.marker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Any of the supervisor's threads may have forked the agent.
	tasks, _ := filepath.Glob("/proc/" + strconv.Itoa(sv.cmd.Process.Pid) + "/task/*/children")
	killed := 0
	for _, task := range tasks {
		b, _ := os.ReadFile(task)
		for _, c := range strings.Fields(string(b)) {
			if n, err := strconv.Atoi(c); err == nil && syscall.Kill(n, syscall.SIGKILL) == nil {
				killed++
			}
		}
	}
	return killed
}

// heal lets agents start again.
func (sv *supervisor) heal(t *testing.T) {
	t.Helper()
	if err := os.Remove(sv.marker); err != nil {
		t.Fatal(err)
	}
}

// crashes counts the agents that exited at start.
func (sv *supervisor) crashes() int {
	return strings.Count(sv.stderr.String(), "crashagent: crashing at start")
}

// waitProbe waits for /healthz/ready on addr to answer code with a body
// starting with prefix.
func waitProbe(t *testing.T, addr string, code int, prefix string) {
	t.Helper()
	var last string
	testenv.Eventually(t, "ready "+strconv.Itoa(code)+" "+prefix, 2*time.Minute, func() bool {
		resp, err := http.Get("http://" + addr + "/healthz/ready")
		if err != nil {
			last = err.Error()
			return false
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		last = resp.Status + " " + string(b)
		return resp.StatusCode == code && strings.HasPrefix(string(b), prefix)
	})
	t.Logf("probe: %s", strings.TrimSpace(last))
}

func getBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

// askA asks name's A record and returns the first address, or "" on an
// error or an empty answer.
func askA(t *testing.T, proto, addr, name string) string {
	t.Helper()
	m := new(dns.Msg).SetQuestion(dns.Fqdn(name), dns.TypeA)
	r, _, err := (&dns.Client{Net: proto, Timeout: 5 * time.Second}).Exchange(m, addr)
	if err != nil || len(r.Answer) == 0 {
		return ""
	}
	if a, ok := r.Answer[0].(*dns.A); ok {
		return a.A.String()
	}
	return ""
}

// querier asks a name over UDP every 20 ms, as an application would, and
// counts the lookups that got no answer (an error or a timeout of 5s).
type querier struct {
	answered, failed atomic.Int64
	done             chan struct{}
	wg               sync.WaitGroup
}

func startQuerier(t *testing.T, addr string) *querier {
	q := &querier{done: make(chan struct{})}
	q.wg.Add(1)
	go func() {
		defer q.wg.Done()
		c := &dns.Client{Timeout: 5 * time.Second}
		for {
			select {
			case <-q.done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			m := new(dns.Msg).SetQuestion("web.demo.svc.cluster.local.", dns.TypeA)
			if r, _, err := c.Exchange(m, addr); err != nil || r.Rcode != dns.RcodeSuccess || len(r.Answer) == 0 {
				q.failed.Add(1)
			} else {
				q.answered.Add(1)
			}
		}
	}()
	t.Cleanup(func() { q.stop() })
	return q
}

func (q *querier) stop() (answered, failed int64) {
	select {
	case <-q.done:
	default:
		close(q.done)
	}
	q.wg.Wait()
	return q.answered.Load(), q.failed.Load()
}

// rss returns the process's anonymous and total resident memory, in kB.
func rss(t *testing.T, pid int) string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return "?"
	}
	var anon, total string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) > 1 && f[0] == "RssAnon:":
			anon = f[1]
		case len(f) > 1 && f[0] == "VmRSS:":
			total = f[1]
		}
	}
	return anon + "/" + total
}

// testUpstream is a real DNS server on loopback, UDP and TCP on one port,
// answering every A question with 192.0.2.1.
type testUpstream struct {
	addr    string
	queries atomic.Int64
}

func newTestUpstream(t *testing.T) *testUpstream {
	t.Helper()
	u := &testUpstream{}
	u.addr = testenv.ServeDNS(t, testenv.AnswerA("192.0.2.1", 30, &u.queries))
	return u
}

// writeTestState writes a state file as the agent's client persists it:
// a version and a full table of one name with settings s.
func writeTestState(t *testing.T, dir string, s *namewire.AgentSettings) {
	t.Helper()
	table := namewire.AppendEntry(nil, "web.demo.svc.cluster.local", nil)
	table = namewire.AppendTableSettings(table, s)
	b := protowire.AppendTag(nil, namewire.FieldResponseVersion, protowire.BytesType)
	b = protowire.AppendString(b, "v7")
	b = protowire.AppendTag(b, namewire.FieldResponseFull, protowire.BytesType)
	b = protowire.AppendBytes(b, table)
	if err := os.WriteFile(filepath.Join(dir, safemode.StateFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}
