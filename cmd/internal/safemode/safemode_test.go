package safemode

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

func startServer(t *testing.T, probe string) (*Server, string, *metrics.Registry) {
	t.Helper()
	files, addr := sockets(t)
	reg := metrics.NewRegistry()
	s, err := New(Config{Files: files, ProbeAddr: probe, Registry: reg,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, addr, reg
}

// TestServerForwards: in safe mode every query, over UDP and TCP, is
// answered by the upstream under the client's ID.
func TestServerForwards(t *testing.T) {
	up := newUpstream(t)
	s, addr, _ := startServer(t, "")
	if err := s.Enter("test", Mode{Upstreams: []string{up.addr}}); err != nil {
		t.Fatal(err)
	}
	for _, proto := range []string{"udp", "tcp"} {
		r, _ := ask(t, proto, addr, "example.org")
		if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 1 || r.Answer[0].(*dns.A).A.String() != "192.0.2.1" {
			t.Errorf("%s: reply %v, want the upstream's A 192.0.2.1", proto, r)
		}
	}
	if n := up.queries.Load(); n != 2 {
		t.Errorf("upstream saw %d queries, want 2", n)
	}
}

// TestServerRefuses: with an enforcing policy every query is REFUSED at
// once and nothing reaches the upstream.
func TestServerRefuses(t *testing.T) {
	up := newUpstream(t)
	s, addr, _ := startServer(t, "")
	if err := s.Enter("test", Mode{Upstreams: []string{up.addr}, Policy: Policy{Enforcing: true, Why: "policy"}}); err != nil {
		t.Fatal(err)
	}
	for _, proto := range []string{"udp", "tcp"} {
		if r, _ := ask(t, proto, addr, "example.org"); r.Rcode != dns.RcodeRefused {
			t.Errorf("%s: rcode %s, want REFUSED", proto, dns.RcodeToString[r.Rcode])
		}
	}
	if n := up.queries.Load(); n != 0 {
		t.Errorf("upstream saw %d queries, want none", n)
	}
}

// TestServerHandsBack: after Leave the supervisor reads nothing more (a
// datagram waits in the socket for whoever reads next) and the probe
// address is free; Enter resumes on the same sockets.
func TestServerHandsBack(t *testing.T) {
	up := newUpstream(t)
	probe := testenv.FreeAddr(t)
	s, addr, reg := startServer(t, probe)
	mode := Mode{Upstreams: []string{up.addr}}
	if err := s.Enter("crash loop", mode); err != nil {
		t.Fatal(err)
	}
	code, body := get(t, "http://"+probe+"/healthz/ready")
	if code != http.StatusOK || !strings.HasPrefix(body, "safe mode: crash loop") {
		t.Errorf("ready = %d %q, want 200 safe mode: crash loop", code, body)
	}
	s.Leave()
	// The probe address is free for the agent.
	l, err := net.Listen("tcp", probe)
	if err != nil {
		t.Fatalf("probe address after Leave: %v", err)
	}
	l.Close()
	// A query sent now is not read by safe mode: it waits in the socket
	// for the next reader, here a stand-in for the agent on the same file.
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	m := new(dns.Msg).SetQuestion("queued.example.", dns.TypeA)
	b, _ := m.Pack()
	c.Write(b)
	agent, err := net.FilePacketConn(s.cfg.Files[0])
	if err != nil {
		t.Fatal(err)
	}
	agent.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	n, _, err := agent.ReadFrom(buf)
	agent.Close()
	if err != nil || n != len(b) {
		t.Fatalf("the agent's read after Leave: %d bytes, %v; want the query (safe mode must not read it)", n, err)
	}
	if err := s.Enter("crash loop", mode); err != nil {
		t.Fatal(err)
	}
	if r, _ := ask(t, "udp", addr, "again.example"); len(r.Answer) != 1 {
		t.Errorf("after Enter again: reply %v, want the upstream's answer", r)
	}
	var sb strings.Builder
	reg.WriteText(&sb)
	for _, want := range []string{"meshdns_agent_safe_mode 1", "meshdns_agent_safe_mode_entries_total 1", `meshdns_agent_safe_mode_queries_total{result="forwarded"} 1`} {
		if !strings.Contains(sb.String(), want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, sb.String())
		}
	}
	s.Leave()
	s.Recovered()
	sb.Reset()
	reg.WriteText(&sb)
	if !strings.Contains(sb.String(), "meshdns_agent_safe_mode 0\n") {
		t.Errorf("after Recovered, metrics lack meshdns_agent_safe_mode 0:\n%s", sb.String())
	}
}

// TestServerProbeRefusing: refusing, the pod is not ready (its lookups fail).
func TestServerProbeRefusing(t *testing.T) {
	probe := testenv.FreeAddr(t)
	s, _, _ := startServer(t, probe)
	if err := s.Enter("crash loop", Mode{Policy: Policy{Enforcing: true, Why: "the last version enforces a DNS policy"}}); err != nil {
		t.Fatal(err)
	}
	code, body := get(t, "http://"+probe+"/healthz/ready")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "safe mode, refusing every query (the last version enforces a DNS policy): crash loop") {
		t.Errorf("ready = %d %q, want 503 naming the policy and the reason", code, body)
	}
	if code, _ := get(t, "http://"+probe+"/healthz/live"); code != http.StatusOK {
		t.Errorf("live = %d, want 200", code)
	}
}

func get(t testing.TB, url string) (int, string) {
	t.Helper()
	c := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServerHandsBackTCP: a connection open when safe mode stops is
// closed, so the client asks again on a new one, which the agent accepts.
func TestServerHandsBackTCP(t *testing.T) {
	up := newUpstream(t)
	s, addr, _ := startServer(t, "")
	if err := s.Enter("test", Mode{Upstreams: []string{up.addr}}); err != nil {
		t.Fatal(err)
	}
	co, err := dns.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer co.Close()
	if err := co.WriteMsg(new(dns.Msg).SetQuestion("example.org.", dns.TypeA)); err != nil {
		t.Fatal(err)
	}
	if r, err := co.ReadMsg(); err != nil || len(r.Answer) != 1 {
		t.Fatalf("first query: %v, %v", r, err)
	}
	s.Leave()
	co.SetReadDeadline(time.Now().Add(10 * time.Second))
	if r, err := co.ReadMsg(); err == nil {
		t.Fatalf("after Leave the connection still answers: %v", r)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatal("after Leave the connection stays open")
	}
}

// TestServerLeaveLosesNoQuery: a query safe mode read as it was told to
// leave is still answered (Leave sends the answers being made), and one
// it did not read waits in the socket for the next Enter: through many
// tries of the agent under a stream of queries, every query is answered.
func TestServerLeaveLosesNoQuery(t *testing.T) {
	up := newUpstream(t)
	s, addr, _ := startServer(t, "")
	mode := Mode{Upstreams: []string{up.addr}}
	c, err := net.Dial("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const queries = 2000
	answered := make(chan map[uint16]bool, 1)
	go func() {
		got := map[uint16]bool{}
		buf := make([]byte, 512)
		c.SetReadDeadline(time.Now().Add(20 * time.Second))
		for len(got) < queries {
			n, err := c.Read(buf)
			if err != nil {
				break
			}
			var r dns.Msg
			if r.Unpack(buf[:n]) == nil {
				got[r.Id] = true
			}
		}
		answered <- got
	}()
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		for id := range queries {
			m := new(dns.Msg).SetQuestion("q.example.", dns.TypeA)
			m.Id = uint16(id)
			b, _ := m.Pack()
			c.Write(b)
			// Slow enough for the socket's queue to hold what waits
			// through a try.
			time.Sleep(500 * time.Microsecond)
		}
	}()
	for tries := 0; ; tries++ {
		if err := s.Enter("crash loop", mode); err != nil {
			t.Fatal(err)
		}
		select {
		case <-sent:
			got := <-answered
			if len(got) != queries {
				t.Fatalf("%d of %d queries answered through %d tries of the agent", len(got), queries, tries)
			}
			return
		default:
		}
		s.Leave() // a try of the agent, which reads nothing
	}
}
