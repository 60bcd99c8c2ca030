package stream

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/agent"
	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// pollTimeout bounds every wait: generous, for -race on a loaded 2-core
// machine. A passing test waits far less.
const pollTimeout = 20 * time.Second

// upstreamIP is what the test upstream answers for every A question
// (TEST-NET-2), so a forwarded answer is told apart from a table answer.
const upstreamIP = "198.51.100.7"

func logger() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	return slog.New(slog.DiscardHandler)
}

// httpClient keeps no idle connections, so nothing outlives a test for the
// goroutine leak check.
var httpClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

// get returns the status code and body of a GET.
func get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := httpClient.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// metric returns the sum of the samples of one metric family on a
// Prometheus text endpoint whose labels contain every one of labels
// (`result="ok"`); 0 when absent.
func metric(t testing.TB, url, name string, labels ...string) float64 {
	t.Helper()
	code, body := get(t, url)
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, code, body)
	}
	var sum float64
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		series, value, ok := strings.Cut(line, " ")
		if !ok || (series != name && !strings.HasPrefix(series, name+"{")) {
			continue
		}
		matches := true
		for _, l := range labels {
			matches = matches && strings.Contains(series, l)
		}
		if !matches {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("%s: %q: %v", url, line, err)
		}
		sum += v
	}
	return sum
}

// poll calls cond until it returns true or pollTimeout passes, then fails
// the test with what describe says.
func poll(t testing.TB, cond func() bool, describe func() string) {
	t.Helper()
	deadline := time.Now().Add(pollTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", pollTimeout, describe())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// entries is an entries file: a zone (authoritative in the agents, so
// unknown names in it are NXDOMAIN) and one entry per line of names,
// "hostname address [namespace...]".
func entries(zone string, names ...string) string {
	var b strings.Builder
	b.WriteString("zones: [" + zone + "]\nentries:\n")
	for _, n := range names {
		f := strings.Fields(n)
		b.WriteString("  - hostname: " + f[0] + "\n    addresses: [\"" + f[1] + "\"]\n")
		if len(f) > 2 {
			b.WriteString("    namespaces: [" + strings.Join(f[2:], ", ") + "]\n")
		}
	}
	return b.String()
}

// writeFile replaces dir/name atomically (a hidden temp file, which the
// file source skips, renamed over it), as editors and ConfigMaps do, so the
// control planes never read a half-written file.
func writeFile(t testing.TB, dir, name, content string) {
	t.Helper()
	testenv.ReplaceFile(t, filepath.Join(dir, name), content)
}

// upstream is a DNS server on 127.0.0.1:0 answering every A question with
// upstreamIP and counting the questions per name.
type upstream struct {
	addr string
	mu   sync.Mutex
	seen map[string]int // guarded by mu; lower-case FQDN -> questions
}

func startUpstream(t testing.TB) *upstream {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &upstream{addr: pc.LocalAddr().String(), seen: map[string]int{}}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if len(r.Question) == 1 {
			q := r.Question[0]
			u.mu.Lock()
			u.seen[strings.ToLower(q.Name)]++
			u.mu.Unlock()
			if q.Qtype == dns.TypeA {
				rr, _ := dns.NewRR(q.Name + " 60 IN A " + upstreamIP)
				m.Answer = append(m.Answer, rr)
			}
		}
		_ = w.WriteMsg(m)
	})}
	testenv.Serve(t, srv)
	return u
}

// asked returns how many questions for name the upstream received.
func (u *upstream) asked(name string) int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.seen[strings.ToLower(dns.Fqdn(name))]
}

// controlPlane is one running control plane.
type controlPlane struct {
	grpc  string // gRPC address, 127.0.0.1:port
	admin string // admin base URL
	stop  func() // cancels Run and waits for it; idempotent
}

// startControlPlane runs a control plane on the entries folder dir, its
// gRPC server on grpcAddr ("" is 127.0.0.1:0; a former control plane's
// address restarts it there) and its admin server on 127.0.0.1:0, with the
// command's defaults otherwise. It returns once the first version is built.
func startControlPlane(t testing.TB, dir, grpcAddr string) *controlPlane {
	t.Helper()
	return startControlPlaneWith(t, dir, grpcAddr, nil)
}

// startControlPlaneWith is startControlPlane with cfg changing the
// configuration (nil: none) before New.
func startControlPlaneWith(t testing.TB, dir, grpcAddr string, cfg func(*controlplane.Config)) *controlPlane {
	t.Helper()
	if grpcAddr == "" {
		grpcAddr = "127.0.0.1:0"
	}
	gl, err := net.Listen("tcp", grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		gl.Close()
		t.Fatal(err)
	}
	c0 := controlplane.Config{
		GRPCListener: gl, AdminListener: al, Entries: []string{dir},
		Debounce: 20 * time.Millisecond, Logger: logger(),
	}
	if cfg != nil {
		cfg(&c0)
	}
	cp, err := controlplane.New(c0)
	if err != nil {
		gl.Close()
		al.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cp.Run(ctx) }()
	var once sync.Once
	c := &controlPlane{grpc: gl.Addr().String(), admin: "http://" + al.Addr().String()}
	c.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("control plane %s: %v", c.grpc, err)
			}
		})
	}
	t.Cleanup(c.stop)
	poll(t, cp.Ready, func() string { return "control plane " + c.grpc + " built no version" })
	return c
}

// metric reads one metric of the control plane's /metrics.
func (c *controlPlane) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	return metric(t, c.admin+"/metrics", name, labels...)
}

// agentOptions are what the tests vary between agents.
type agentOptions struct {
	namespace     string
	controlPlanes []string
	upstream      string
	stateDir      string        // "" persists nothing
	readyGrace    time.Duration // 0 is the agent's default
}

// testAgent is one running agent.
type testAgent struct {
	dns   string // UDP address
	admin string // admin base URL
	stop  func() // cancels Run and waits for it; idempotent
}

// startAgent runs an agent as `meshdns agent --control-plane ...` would,
// with DNS and admin on 127.0.0.1:0 and the forwarding cache off (so every
// forwarded question reaches the upstream). Its sockets are bound when it
// returns; queries sent before Run serves are answered once it does.
func startAgent(t testing.TB, o agentOptions) *testAgent {
	t.Helper()
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	search := o.namespace + ".svc.cluster.local svc.cluster.local cluster.local"
	if err := os.WriteFile(resolv, []byte("nameserver 127.0.0.1\nsearch "+search+"\noptions ndots:5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{
		DNSAddrs: []string{"127.0.0.1:0"}, AdminAddr: "127.0.0.1:0", ResolvConf: resolv,
		Upstreams: []string{o.upstream}, Namespace: o.namespace, PodName: "client-0",
		ControlPlanes: o.controlPlanes, StateDir: o.stateDir, ReadyGrace: o.readyGrace,
		CacheSize: -1, Logger: logger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	ta := &testAgent{dns: a.DNSAddr().String(), admin: "http://" + a.AdminAddr().String()}
	ta.stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("agent %s: %v", ta.dns, err)
			}
		})
	}
	t.Cleanup(ta.stop)
	return ta
}

// ask sends one question over UDP and returns the reply.
func (a *testAgent) ask(t testing.TB, name string, qtype uint16) *dns.Msg {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	c := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	var err error
	for range 3 {
		var r *dns.Msg
		if r, _, err = c.Exchange(m, a.dns); err == nil {
			return r
		}
	}
	t.Fatalf("%s %s: %v", name, dns.TypeToString[qtype], err)
	return nil
}

// answerA asks for the A records of name and returns the reply in a
// comparable form: the rcode, then the answer records' types and data,
// sorted.
func (a *testAgent) answerA(t testing.TB, name string) string {
	t.Helper()
	r := a.ask(t, name, dns.TypeA)
	var rrs []string
	for _, rr := range r.Answer {
		f := strings.Fields(rr.String())
		rrs = append(rrs, strings.Join(f[3:], " "))
	}
	sort.Strings(rrs)
	return strings.TrimSpace(dns.RcodeToString[r.Rcode] + " " + strings.Join(rrs, "; "))
}

// await asks for the A records of name until the answer is want.
func (a *testAgent) await(t testing.TB, name, want string) {
	t.Helper()
	var got string
	poll(t, func() bool { got = a.answerA(t, name); return got == want },
		func() string { return name + " A = " + strconv.Quote(got) + ", want " + strconv.Quote(want) })
}

// controlPlane returns the address of the agent's open stream ("" between
// streams), from its /debug/nametable; "" also before its first table.
func (a *testAgent) controlPlane(t testing.TB) string {
	t.Helper()
	code, body := get(t, a.admin+"/debug/nametable")
	if code != http.StatusOK {
		return ""
	}
	var d struct {
		ControlPlane string `json:"control_plane"`
	}
	if err := json.Unmarshal([]byte(body), &d); err != nil {
		t.Fatalf("/debug/nametable: %v", err)
	}
	return d.ControlPlane
}

// awaitControlPlane waits until the agent's stream is open to addr ("" for
// no stream).
func (a *testAgent) awaitControlPlane(t testing.TB, addr string) {
	t.Helper()
	var got string
	poll(t, func() bool { got = a.controlPlane(t); return got == addr },
		func() string {
			return "agent's control plane = " + strconv.Quote(got) + ", want " + strconv.Quote(addr)
		})
}

// ready returns the status code and body of the agent's /healthz/ready.
func (a *testAgent) ready(t testing.TB) (int, string) {
	t.Helper()
	return get(t, a.admin+"/healthz/ready")
}

// metric reads one metric of the agent's /metrics.
func (a *testAgent) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	return metric(t, a.admin+"/metrics", name, labels...)
}
