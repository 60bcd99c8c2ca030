package main

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// runResolver is the machine's resolver in TestMakeRunForwardsToMachineResolver:
// a loopback address other than the usual stubs (127.0.0.1, 127.0.0.53),
// on port 53 because a resolv.conf nameserver line has no port.
const runResolver = "127.0.0.153"

// TestMakeRunForwardsToMachineResolver runs the agent with exactly the
// command line `make run` runs (read from `make -n run`), on a machine whose
// resolv.conf names a resolver on loopback, and checks that the demo does
// its job: the sample table answers its names, every other name goes to
// the machine's resolver, and the agent's start line says which upstream
// it uses and where it came from.
func TestMakeRunForwardsToMachineResolver(t *testing.T) {
	testenv.RequireTool(t, "make")
	up := startRunResolver(t)
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("search corp.example\nnameserver "+runResolver+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := makeRunArgs(t, "RUN_RESOLV_CONF="+resolv)
	if !strings.Contains(strings.Join(args, " "), "--upstream "+runResolver) {
		t.Fatalf("make run passes no --upstream %s from %s: %q", runResolver, resolv, args)
	}

	// The demo's files are relative to the repository's root, where make
	// runs; the ports are moved off the fixed ones so a running demo or
	// agent on this machine does not clash (later flags win).
	t.Chdir("../..")
	dnsAddr := testenv.FreeAddr(t)
	args = append(args, "--dns-addr", dnsAddr, "--admin-addr", "127.0.0.1:0")
	var logs testenv.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- cli.Run(ctx, args, os.Stdout, &logs) }()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("agent exited %d:\n%s", code, logs.String())
		}
	})
	testenv.Eventually(t, "the agent to be ready", time.Minute, func() bool {
		return strings.Contains(logs.String(), `msg="agent ready"`)
	})

	start := logLine(logs.String(), `msg="agent starting"`)
	for _, want := range []string{"upstreams=[" + runResolver + ":53]", "upstreams_from=--upstream"} {
		if !strings.Contains(start, want) {
			t.Errorf("start line %q lacks %s", start, want)
		}
	}
	for _, tc := range []struct{ name, want string }{
		{name: "web.demo.svc.cluster.local.", want: "10.96.0.20"}, // the sample table
		{name: "www.outside.example.", want: up.answer.String()},  // the machine's resolver
	} {
		if got := askA(t, dnsAddr, tc.name); got != tc.want {
			t.Errorf("%s A = %q, want %q\nagent log:\n%s", tc.name, got, tc.want, logs.String())
		}
	}
	if up.asked("www.outside.example.") == 0 {
		t.Errorf("the machine's resolver was not asked for www.outside.example")
	}
}

// TestMakeRunSaysWhenUpstreamIsDown: before the demo starts, make run says
// which upstreams it forwards to and names each one that does not answer,
// so a machine whose resolvers are unreachable is told so at start.
func TestMakeRunSaysWhenUpstreamIsDown(t *testing.T) {
	testenv.RequireTool(t, "make")
	testenv.RequireTool(t, "dig")
	startRunResolver(t)
	const down = "127.0.0.154" // nothing listens there
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver "+runResolver+"\nnameserver "+down+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("make", "-s", "-C", "../..", "run-upstreams", "RUN_RESOLV_CONF="+resolv).CombinedOutput()
	if err != nil {
		t.Fatalf("make run-upstreams: %v\n%s", err, out)
	}
	got := string(out)
	for _, want := range []string{
		"names outside the table go to " + runResolver + "," + down + " (from " + resolv + ")",
		"upstream " + down + " does not answer",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("make run-upstreams said %q, want it to say %q", got, want)
		}
	}
	if strings.Contains(got, "upstream "+runResolver+" does not answer") {
		t.Errorf("make run-upstreams calls the answering %s down: %q", runResolver, got)
	}
}

// makeRunArgs returns the arguments of the agent command `make run` runs,
// with vars set on make's command line, without the binary's name.
func makeRunArgs(t *testing.T, vars ...string) []string {
	t.Helper()
	cmd := exec.Command("make", append([]string{"-s", "-n", "-C", "../..", "run"}, vars...)...)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make -n run: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 && filepath.Base(f[0]) == "meshdns" && f[1] == "agent" {
			return f[1:]
		}
	}
	t.Fatalf("make -n run runs no meshdns agent:\n%s", out)
	return nil
}

// logLine returns the first line of logs holding s, or "".
func logLine(logs, s string) string {
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, s) {
			return l
		}
	}
	return ""
}

// runUpstream is a resolver answering every A question with one address
// and counting what it is asked.
type runUpstream struct {
	answer net.IP
	names  chan string
	seen   map[string]int
}

// startRunResolver serves DNS over UDP on runResolver:53 until the test
// ends. Binding port 53 needs root, as every test that CI runs has.
func startRunResolver(t *testing.T) *runUpstream {
	t.Helper()
	pc, err := net.ListenPacket("udp", net.JoinHostPort(runResolver, "53"))
	if errors.Is(err, syscall.EACCES) {
		testenv.Unavailable(t, "binding %s:53 needs root", runResolver)
	}
	if err != nil {
		t.Fatal(err)
	}
	u := &runUpstream{answer: net.IPv4(192, 0, 2, 53).To4(), names: make(chan string, 64), seen: map[string]int{}}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		if q := r.Question[0]; q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: u.answer})
		}
		select {
		case u.names <- strings.ToLower(r.Question[0].Name):
		default:
		}
		w.WriteMsg(m)
	})}
	testenv.Serve(t, srv)
	return u
}

// asked returns how often name was asked so far.
func (u *runUpstream) asked(name string) int {
	for {
		select {
		case n := <-u.names:
			u.seen[n]++
		default:
			return u.seen[name]
		}
	}
}

// askA asks addr for name's A records over UDP and returns the first
// address, or the rcode when there is none.
func askA(t *testing.T, addr, name string) string {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	c := &dns.Client{Timeout: 10 * time.Second}
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("ask %s: %v", name, err)
	}
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			return a.A.String()
		}
	}
	return dns.RcodeToString[r.Rcode]
}
