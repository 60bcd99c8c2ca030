package upstream

import (
	"bytes"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestCoarseClock checks the default cache clock: close to the wall clock,
// advancing, started by the first query only, stopped by Close (TestMain's
// goleak check fails the package if the ticker outlives it).
func TestCoarseClock(t *testing.T) {
	srv := newServer(t, answerWith(t, 0, []string{"$QNAME 60 IN A 192.0.2.1"}, nil))
	r, err := New(Config{Upstreams: []string{srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if r.clock.running.Load() {
		t.Fatal("clock goroutine started in New")
	}
	ask(t, r, "clock.example.", dns.TypeA)
	if !r.clock.running.Load() {
		t.Fatal("clock goroutine not started by the first query")
	}
	first := r.now()
	if d := time.Since(time.Unix(0, first)); d < -clockTick || d > time.Second {
		t.Errorf("coarse clock off by %v", d)
	}
	m, src := ask(t, r, "clock.example.", dns.TypeA)
	if src != SourceCache || m.Answer[0].Header().Ttl != 60 {
		t.Errorf("second ask: src %v TTL %d, want cache 60", src, m.Answer[0].Header().Ttl)
	}
	time.Sleep(3 * clockTick) // the one sleep: the real ticker must tick
	if got := r.now(); got <= first {
		t.Errorf("coarse clock did not advance in %v", 3*clockTick)
	}
	r.Close()
	if r.clock.running.Load() {
		t.Error("coarse clock still in use after Close: it would freeze")
	}
	if got := r.now(); time.Since(time.Unix(0, got)) > 50*time.Millisecond {
		t.Errorf("after Close the clock reads %v ago", time.Since(time.Unix(0, got)))
	}

	// A resolver closed before any query never starts the goroutine.
	r2, err := New(Config{Upstreams: []string{srv.Addr}})
	if err != nil {
		t.Fatal(err)
	}
	r2.Close()
	r2.now()
	if r2.clock.running.Load() {
		t.Error("clock goroutine started after Close")
	}
}

func TestDebugLog(t *testing.T) {
	srv := newServer(t, answerWith(t, 0, []string{"$QNAME 60 IN A 192.0.2.1"}, nil))
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}, Logger: log})
	ask(t, r, "Log.Example.", dns.TypeAAAA)
	got := buf.String()
	for _, want := range []string{"upstream answered", "qname=log.example.", "qtype=AAAA", "rcode=NOERROR", "duration="} {
		if !strings.Contains(got, want) {
			t.Errorf("debug log %q lacks %q", got, want)
		}
	}
}

func TestIPv6Upstream(t *testing.T) {
	pc, err := net.ListenPacket("udp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(answerWith(t, 0, []string{"$QNAME 60 IN A 192.0.2.6"}, nil))}
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }
	done := make(chan struct{})
	go func() { _ = srv.ActivateAndServe(); close(done) }()
	<-started
	t.Cleanup(func() { _ = srv.Shutdown(); <-done })

	r, _ := newTestResolver(t, Config{Upstreams: []string{pc.LocalAddr().String()}})
	m, _ := ask(t, r, "v6.example.", dns.TypeA)
	if len(m.Answer) != 1 {
		t.Errorf("answer %v, want one A", m.Answer)
	}
}
