package upstream

import (
	"context"
	"fmt"
	"net"
	"os"
	"runtime/metrics"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// answerRawA is a raw server's answer to any question: one A record, TTL 0,
// so nothing is cached and every query goes upstream.
func answerRawA(req []byte) [][]byte {
	m := new(dns.Msg)
	if m.Unpack(req) != nil || len(m.Question) != 1 {
		return nil
	}
	r := new(dns.Msg)
	r.SetReply(m)
	r.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: m.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET}, A: []byte{192, 0, 2, 1}}}
	b, err := r.Pack()
	if err != nil {
		return nil
	}
	return [][]byte{b}
}

// goroutinesCreated reads the runtime's count of goroutines created.
func goroutinesCreated(t testing.TB) uint64 {
	t.Helper()
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		t.Fatalf("no goroutine count: %v", s[0].Value.Kind())
	}
	return s[0].Value.Uint64()
}

// A forwarded query answered within Timeout is asked and waited for on
// the caller's goroutine: no goroutine, channel or timer per try, which
// were most of a forwarded query's hand-offs (and its morestack).
func TestFirstTryStartsNoGoroutine(t *testing.T) {
	srv := rawServer(t, answerRawA)
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}, CacheSize: -1})
	ctx := context.Background()
	ask := func(i int) {
		t.Helper()
		_, src, err := r.AppendReply(ctx, nil, qwire(t, fmt.Sprintf("n%d.example.", i), dns.TypeA))
		if err != nil || src != SourceUpstream {
			t.Fatalf("query %d: src %v err %v, want an upstream answer", i, src, err)
		}
	}
	ask(0) // starts the Resolver's own goroutines (clock, socket closer)
	const n = 50
	before := goroutinesCreated(t)
	for i := 1; i <= n; i++ {
		ask(i)
	}
	// A goroutine of the test runtime may start meanwhile; one per try
	// would be n at least.
	if got := goroutinesCreated(t) - before; got >= n/5 {
		t.Errorf("%d goroutines created for %d forwarded queries, want none", got, n)
	}
}

// The first try that waits alone past Timeout goes on listening on a
// goroutine while the second goes out, and its late reply is taken; the
// sockets of both are closed by Close.
func TestFirstTryHandedOffAfterTimeout(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen udp: %v", err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { pc.Close(); wg.Wait() })
	// The first try is answered only when the second arrives, to the
	// first try's socket.
	wg.Go(func() {
		buf := make([]byte, 512)
		n, first, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		late := answerRawA(append([]byte(nil), buf[:n]...))
		if _, _, err := pc.ReadFrom(buf); err != nil || len(late) == 0 {
			return
		}
		_, _ = pc.WriteTo(late[0], first)
	})
	r, _ := newTestResolver(t, Config{Upstreams: []string{pc.LocalAddr().String()}, CacheSize: -1, Attempts: 2,
		Timeout: 50 * time.Millisecond, ClientTimeout: time.Minute})
	fds := openFDs(t)
	_, src, err := r.AppendReply(context.Background(), nil, qwire(t, "late.example.", dns.TypeA))
	if err != nil || src != SourceUpstream {
		t.Fatalf("src %v err %v, want the first try's late answer", src, err)
	}
	r.Close()
	if got := openFDs(t); got > fds {
		t.Errorf("%d descriptors open after Close, %d before the query", got, fds)
	}
}

// openFDs counts the process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil && os.Getenv("CI") == "" {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	if err != nil {
		t.Fatalf("count descriptors: %v", err)
	}
	return len(ents)
}

// The sockets of finished tries are closed by the closer, a batch at
// once or within closeEvery, without waiting for Close.
func TestFinishedSocketsClosed(t *testing.T) {
	srv := rawServer(t, answerRawA)
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}, CacheSize: -1})
	fds := openFDs(t)
	for i := range closeBatch + 3 { // a full batch and a few more
		if _, _, err := r.AppendReply(context.Background(), nil, qwire(t, fmt.Sprintf("c%d.example.", i), dns.TypeA)); err != nil {
			t.Fatalf("query %d: %v", i, err)
		}
	}
	waitFor(t, func() bool { return openFDs(t) <= fds })
}
