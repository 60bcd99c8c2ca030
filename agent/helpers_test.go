package agent

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"
	"go.uber.org/goleak"

	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// upstreamServer is a real DNS server on loopback standing in for the
// pod's nameserver or a forwarding rule's upstream. It counts the queries
// it gets and notes each name it is asked (lower case).
type upstreamServer struct {
	addr    string
	caFile  string // over TLS: the CA that signed its certificate; else ""
	queries atomic.Int64
	mu      sync.Mutex
	names   []string // guarded by mu
}

// startUpstream starts one over UDP as the pod's nameserver: example.com
// A 192.0.2.80, www.example.com A 192.0.2.81, NXDOMAIN for the rest.
func startUpstream(t testing.TB) *upstreamServer {
	t.Helper()
	ips := map[string]string{"example.com.": "192.0.2.80", "www.example.com.": "192.0.2.81"}
	u := &upstreamServer{}
	u.addr = u.serveUDP(t, func(name string) (string, bool) {
		ip, ok := ips[name]
		return ip, ok
	})
	return u
}

// startNamesUpstream starts one over UDP that answers every A question
// with 192.0.2.1.
func startNamesUpstream(t testing.TB) *upstreamServer {
	t.Helper()
	u := &upstreamServer{}
	u.addr = u.serveUDP(t, answerAll("192.0.2.1"))
	return u
}

// answerAll answers every name with the address a.
func answerAll(a string) func(string) (string, bool) {
	return func(string) (string, bool) { return a, true }
}

// serveUDP serves u on a new UDP socket on 127.0.0.1 and returns its
// address.
func (u *upstreamServer) serveUDP(t testing.TB, answer func(name string) (a string, ok bool)) string {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.serve(t, &dns.Server{PacketConn: pc}, answer)
	return pc.LocalAddr().String()
}

// serve runs srv (its listener set) with u's handler until the test ends.
// answer gives the A address of a name (lower case); not ok is NXDOMAIN.
// Other types of a name it knows get no answer (NODATA).
func (u *upstreamServer) serve(t testing.TB, srv *dns.Server, answer func(name string) (a string, ok bool)) {
	t.Helper()
	srv.Handler = dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		u.queries.Add(1)
		q := r.Question[0]
		name := strings.ToLower(q.Name)
		u.mu.Lock()
		u.names = append(u.names, name)
		u.mu.Unlock()
		m := new(dns.Msg)
		m.SetReply(r)
		if a, ok := answer(name); !ok {
			m.Rcode = dns.RcodeNameError
		} else if q.Qtype == dns.TypeA {
			rr, _ := dns.NewRR(q.Name + " 300 IN A " + a)
			m.Answer = append(m.Answer, rr)
		}
		w.WriteMsg(m)
	})
	testenv.Serve(t, srv)
}

// asked reports whether u was asked name (lower case, fully qualified).
func (u *upstreamServer) asked(name string) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Contains(u.names, name)
}

// quietLogger discards logs unless -v is given.
func quietLogger(t testing.TB) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testAgent is an agent running in-process on loopback port 0.
type testAgent struct {
	*Agent
	dns   string // host:port, UDP and TCP
	admin string // http://host:port
	reg   *meshmetrics.Registry
	stop  func()
}

// startAgent runs an agent until the test ends. cfg gets loopback port-0
// addresses, a search-list resolv.conf for namespace demo, a quiet logger
// and the given upstream unless set, and a log level (info).
func startAgent(t testing.TB, cfg Config) *testAgent {
	t.Helper()
	if cfg.ResolvConf == "" {
		cfg.ResolvConf = writeFile(t, t.TempDir(), "resolv.conf",
			"nameserver 127.0.0.1\nsearch demo.svc.cluster.local svc.cluster.local cluster.local\noptions ndots:5\n")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "demo"
	}
	cfg.DNSAddrs = []string{"127.0.0.1:0"}
	if cfg.AdminAddr == "" {
		cfg.AdminAddr = "127.0.0.1:0"
	}
	if cfg.Logger == nil {
		cfg.Logger = quietLogger(t)
	}
	cfg.LogLevel = new(slog.LevelVar)
	if cfg.FilePollInterval == 0 {
		cfg.FilePollInterval = 100 * time.Millisecond
	}
	reg := meshmetrics.NewRegistry()
	cfg.Registry = reg
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	ta := &testAgent{Agent: a, dns: a.DNSAddr().String(), admin: "http://" + a.AdminAddr().String(), reg: reg}
	var stopped bool
	ta.stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent Run: %v", err)
		}
	}
	t.Cleanup(ta.stop)
	return ta
}

func writeFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// exchange asks addr over proto ("udp" or "tcp").
func exchange(t testing.TB, proto, addr, name string, qtype uint16) *dns.Msg {
	t.Helper()
	c := &dns.Client{Net: proto, Timeout: 3 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	r, _, err := c.Exchange(m, addr)
	if err != nil {
		t.Fatalf("query %s %s over %s: %v", name, dns.TypeToString[qtype], proto, err)
	}
	return r
}

// answerData returns the answer RRs as "owner TYPE data", TTL left out,
// sorted, so tests do not depend on shuffling.
func answerData(m *dns.Msg) []string {
	var out []string
	for _, rr := range m.Answer {
		h := rr.Header()
		data := strings.TrimPrefix(rr.String(), h.String())
		out = append(out, h.Name+" "+dns.TypeToString[h.Rrtype]+" "+data)
	}
	sort.Strings(out)
	return out
}

// eventually polls cond every 20ms for up to 15s.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, what, patience(t), cond)
}

// patience is how long a test waits for an event: until the test binary's
// own deadline (go test -timeout) but for a margin to report what it
// waited for, not a time sized for an idle machine (a table build under
// -race on a loaded 2-core machine takes many times what it takes alone).
func patience(t testing.TB) time.Duration {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			return max(time.Until(dl)-10*time.Second, time.Second)
		}
	}
	return 10 * time.Minute
}

func httpGet(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// readExample returns examples/nametable.json, the demo table.
func readExample(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile("../examples/nametable.json")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// httpPut sends a PUT without a body, as curl -X PUT does, and returns
// the answer's body.
func httpPut(url string) (string, error) {
	req, err := http.NewRequest(http.MethodPut, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// counter reads the sample of a metric with one label from reg's text
// exposition, or 0 when there is none.
func counter(t testing.TB, reg *meshmetrics.Registry, name, label, value string) float64 {
	t.Helper()
	var b bytes.Buffer
	if err := reg.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	prefix := fmt.Sprintf("%s{%s=%q} ", name, label, value)
	for _, line := range strings.Split(b.String(), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return f
		}
	}
	return 0
}

func httpNewRequest(method, url string) (*http.Request, error) {
	return http.NewRequest(method, url, nil)
}

// httpDo sends req and returns the status code.
func httpDo(req *http.Request) (int, error) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, nil
}
