package proxy

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

func TestListenTakenPort(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	cfg := testConfig(&fakeResolver{})
	cfg.Addrs = []string{pc.LocalAddr().String()}
	cfg.UDPSockets = 1
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err == nil || !strings.Contains(err.Error(), "listen udp") {
		t.Errorf("Listen on a taken port: %v, want a listen udp error", err)
	}
	if err := s.Run(context.Background()); err == nil {
		t.Errorf("Run on a taken port returned nil")
	}
}

func TestCloseIdempotentAndStopsRun(t *testing.T) {
	s, err := New(testConfig(&fakeResolver{}))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Run(context.Background()) }()
	// Let Run start serving, then stop it with Close instead of its ctx.
	exchange(t, "udp", udpAddr(s), newQuery("www.example.org.", dns.TypeA))
	for range 2 {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	}
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run still running after Close")
	}
	if err := s.Run(context.Background()); err == nil {
		t.Errorf("Run after Close: nil, want an error")
	}
}

func TestNewRejects(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{name: "no resolver", cfg: Config{}},
		{name: "bad cluster domain", cfg: Config{Resolver: &fakeResolver{}, ClusterDomain: "bad..domain"}},
		// dns.IsDomainName took these; no table can hold them.
		{name: "cluster domain with a space", cfg: Config{Resolver: &fakeResolver{}, ClusterDomain: "cluster local"}},
		{name: "cluster domain with an escape", cfg: Config{Resolver: &fakeResolver{}, ClusterDomain: `cluster\.local`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); err == nil {
				t.Errorf("New(%+v) = nil error", tc.cfg)
			}
		})
	}
}

func TestIPv6Loopback(t *testing.T) {
	c, err := net.ListenPacket("udp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	c.Close()
	cfg := testConfig(&fakeResolver{})
	cfg.Addrs = []string{"127.0.0.1:0", "[::1]:0"}
	s := startServer(t, cfg)
	s.SetTable(demoTable(t))
	for _, a := range s.UDPAddrs() {
		if r := exchange(t, "udp", a.String(), newQuery("web.demo.svc.cluster.local.", dns.TypeA)); len(r.Answer) != 3 {
			t.Errorf("%s: %d answers, want 3", a, len(r.Answer))
		}
	}
	for _, a := range s.TCPAddrs() {
		if r := exchange(t, "tcp", a.String(), newQuery("web.demo.svc.cluster.local.", dns.TypeA)); len(r.Answer) != 3 {
			t.Errorf("%s: %d answers, want 3", a, len(r.Answer))
		}
	}
}

func TestDebugLogs(t *testing.T) {
	tests := []struct {
		name  string
		level slog.Level
		want  []string
	}{
		{name: "debug logs each query", level: slog.LevelDebug, want: []string{"qname=web.demo.svc.cluster.local.", "qtype=A", "rcode=NOERROR", "source=table", "protocol=udp"}},
		{name: "info logs nothing per query", level: slog.LevelInfo},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf testenv.Buffer
			cfg := testConfig(&fakeResolver{})
			cfg.Logger = slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tc.level}))
			s := startServer(t, cfg)
			s.SetTable(demoTable(t))
			exchange(t, "udp", udpAddr(s), newQuery("web.demo.svc.cluster.local.", dns.TypeA))
			out := buf.String()
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("log lacks %q:\n%s", w, out)
				}
			}
			if len(tc.want) == 0 && strings.Contains(out, "dns query") {
				t.Errorf("per-query line at %s:\n%s", tc.level, out)
			}
		})
	}
}

// Two servers on one port fail loudly even with SO_REUSEPORT sockets.
func TestSecondServerOnSamePortFails(t *testing.T) {
	cfg := testConfig(&fakeResolver{})
	cfg.UDPSockets = 2
	first := startServer(t, cfg)
	cfg2 := testConfig(&fakeResolver{})
	cfg2.UDPSockets = 2
	cfg2.Addrs = []string{udpAddr(first)}
	second, err := New(cfg2)
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Listen(); err == nil {
		second.Close()
		t.Fatalf("second server bound %s too", udpAddr(first))
	}
}

// TestDrainHandsOver: while a forwarded query waits in a first server, a
// second joins its address with Takeover and the first drains. Queries sent
// during the drain are answered, the waiting one too, and Drain returns
// once it is.
func TestDrainHandsOver(t *testing.T) {
	res := &fakeResolver{answer: staticAnswer(t, "A 192.0.2.9"), block: make(chan struct{})}
	first := startServer(t, testConfig(res))
	first.SetTable(demoTable(t))
	slow := make(chan *dns.Msg, 1)
	go func() {
		c := &dns.Client{Net: "udp", Timeout: 5 * time.Second}
		r, _, _ := c.Exchange(newQuery("slow.example.org.", dns.TypeA), udpAddr(first))
		slow <- r
	}()
	testenv.Eventually(t, "the forwarded query to reach the resolver", 5*time.Second, func() bool { return res.calls.Load() > 0 })

	cfg := testConfig(&fakeResolver{})
	cfg.Addrs = []string{udpAddr(first)}
	taken, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if taken.Listen() == nil {
		taken.Close()
		t.Fatal("a second server without Takeover bound a taken address")
	}
	cfg.Takeover = true
	cfg.Registry = newTestRegistry()
	second := startServer(t, cfg)
	second.SetTable(demoTable(t))

	drained := make(chan error, 1)
	go func() { drained <- first.Drain(context.Background()) }()
	for i := range 20 {
		if r := exchange(t, "udp", udpAddr(first), newQuery("web.demo.svc.cluster.local.", dns.TypeA)); len(r.Answer) != 3 {
			t.Fatalf("query %d during the drain: %d answers, want 3", i, len(r.Answer))
		}
	}
	select {
	case err := <-drained:
		t.Fatalf("Drain returned %v with a query still waiting", err)
	default:
	}
	close(res.block)
	if r := <-slow; r == nil || len(r.Answer) != 1 {
		t.Fatalf("the query waiting during the drain got %v, want its answer", r)
	}
	if err := <-drained; err != nil {
		t.Fatalf("Drain: %v", err)
	}
}
