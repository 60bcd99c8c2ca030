package upstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

func TestAppendReplyForwards(t *testing.T) {
	tests := []struct {
		name    string
		qname   string
		qtype   uint16
		rcode   int
		answer  []string
		ns      []string
		want    view
		wantSrc Source
	}{
		{
			name:    "A record",
			qname:   "www.example.com.",
			qtype:   dns.TypeA,
			answer:  []string{"$QNAME 60 IN A 192.0.2.1", "$QNAME 60 IN A 192.0.2.2"},
			want:    view{Rcode: "NOERROR", Answer: []string{"www.example.com.\t60\tIN\tA\t192.0.2.1", "www.example.com.\t60\tIN\tA\t192.0.2.2"}},
			wantSrc: SourceUpstream,
		},
		{
			name:    "question case echoed",
			qname:   "WwW.ExAmple.COM.",
			qtype:   dns.TypeAAAA,
			answer:  []string{"www.example.com. 60 IN AAAA 2001:db8::1"},
			want:    view{Rcode: "NOERROR", Answer: []string{"WwW.ExAmple.COM.\t60\tIN\tAAAA\t2001:db8::1"}},
			wantSrc: SourceUpstream,
		},
		{
			name:    "NXDOMAIN passed on",
			qname:   "nope.example.com.",
			qtype:   dns.TypeA,
			rcode:   dns.RcodeNameError,
			ns:      []string{"example.com. 300 IN SOA ns.example.com. host.example.com. 1 7200 900 1209600 30"},
			want:    view{Rcode: "NXDOMAIN", Ns: []string{"example.com.\t30\tIN\tSOA\tns.example.com. host.example.com. 1 7200 900 1209600 30"}},
			wantSrc: SourceUpstream,
		},
		{
			name:    "FORMERR passed on, not an error",
			qname:   "odd.example.com.",
			qtype:   dns.TypeA,
			rcode:   dns.RcodeFormatError,
			want:    view{Rcode: "FORMERR"},
			wantSrc: SourceUpstream,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, answerWith(t, tc.rcode, tc.answer, tc.ns))
			r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}})
			m, src := ask(t, r, tc.qname, tc.qtype)
			if diff := cmp.Diff(tc.want, viewOf(m)); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
			if src != tc.wantSrc {
				t.Errorf("source %v, want %v", src, tc.wantSrc)
			}
		})
	}
}

// TestQueryOnTheWire checks what reaches the upstream: a random ID, RD, the
// question, and OPT with UDP size 1232; and a fresh source port per query.
func TestQueryOnTheWire(t *testing.T) {
	var (
		mu    sync.Mutex
		ids   = map[uint16]bool{}
		ports = map[string]bool{}
		sizes []uint16
	)
	srv := newServer(t, func(w dns.ResponseWriter, req *dns.Msg) {
		mu.Lock()
		ids[req.Id] = true
		ports[w.RemoteAddr().String()] = true
		if o := req.IsEdns0(); o != nil {
			sizes = append(sizes, o.UDPSize())
		} else {
			sizes = append(sizes, 0)
		}
		mu.Unlock()
		m := new(dns.Msg)
		m.SetRcode(req, dns.RcodeNameError) // no SOA: not cached
		_ = w.WriteMsg(m)
	})
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}})
	const n = 20
	for range n {
		ask(t, r, "x.example.", dns.TypeA)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sizes) != n {
		t.Fatalf("server saw %d queries, want %d (nothing cached)", len(sizes), n)
	}
	for _, s := range sizes {
		if s != ednsSize {
			t.Errorf("EDNS UDP size %d, want %d", s, ednsSize)
		}
	}
	// 20 draws from 65536 IDs collide with probability < 0.3%; ports are
	// handed out by the kernel and do not repeat this quickly.
	if len(ids) < n-1 {
		t.Errorf("only %d distinct IDs in %d queries", len(ids), n)
	}
	if len(ports) < n-1 {
		t.Errorf("only %d distinct source ports in %d queries", len(ports), n)
	}
}

func TestTimeoutThenNextUpstream(t *testing.T) {
	silent := rawServer(t, func([]byte) [][]byte { return nil })
	good := newServer(t, answerWith(t, 0, []string{"$QNAME 60 IN A 192.0.2.7"}, nil))
	r, _ := newTestResolver(t, Config{Upstreams: []string{silent.Addr, good.Addr}, Timeout: 200 * time.Millisecond})
	fixedOrder(r)
	start := time.Now()
	m, _ := ask(t, r, "a.example.", dns.TypeA)
	if got := viewOf(m).Answer; len(got) != 1 {
		t.Fatalf("answer %v, want the good upstream's A", got)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("answered after %v: the silent upstream was not waited for", d)
	}
	if silent.Queries.Load() != 1 || good.Queries.Load() != 1 {
		t.Errorf("queries silent=%d good=%d, want 1 and 1", silent.Queries.Load(), good.Queries.Load())
	}
	if got := errCount(r, 0, kindTimeout); got != 1 {
		t.Errorf("timeouts counted for the silent upstream = %v, want 1", got)
	}
}

// rawReply builds a raw reply to req; mutate changes it before packing.
func rawReply(t testing.TB, req []byte, mutate func(m *dns.Msg)) []byte {
	t.Helper()
	q := new(dns.Msg)
	if err := q.Unpack(req); err != nil {
		t.Errorf("server: unpack query: %v", err)
		return nil
	}
	m := new(dns.Msg)
	m.SetReply(q)
	m.Answer = []dns.RR{mustRR(t, q.Question[0].Name+" 60 IN A 192.0.2.9")}
	if mutate != nil {
		mutate(m)
	}
	b, err := m.Pack()
	if err != nil {
		t.Errorf("server: pack: %v", err)
	}
	return b
}

func TestLyingUpstream(t *testing.T) {
	lies := []struct {
		name   string
		mutate func(m *dns.Msg)
	}{
		{name: "wrong ID", mutate: func(m *dns.Msg) { m.Id++ }},
		{name: "wrong name", mutate: func(m *dns.Msg) { m.Question[0].Name = "evil.example." }},
		{name: "wrong type", mutate: func(m *dns.Msg) { m.Question[0].Qtype = dns.TypeAAAA }},
		{name: "wrong class", mutate: func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS }},
		{name: "not a response", mutate: func(m *dns.Msg) { m.Response = false }},
		{name: "no question", mutate: func(m *dns.Msg) { m.Question = nil }},
	}
	for _, lie := range lies {
		t.Run(lie.name, func(t *testing.T) {
			srv := rawServer(t, func(req []byte) [][]byte {
				bad := rawReply(t, req, func(m *dns.Msg) {
					lie.mutate(m)
					m.Answer = []dns.RR{mustRR(t, "evil.example. 60 IN A 203.0.113.66")}
				})
				return [][]byte{bad, bad, rawReply(t, req, nil)}
			})
			r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}})
			m, _ := ask(t, r, "Good.Example.", dns.TypeA)
			want := view{Rcode: "NOERROR", Answer: []string{"Good.Example.\t60\tIN\tA\t192.0.2.9"}}
			if diff := cmp.Diff(want, viewOf(m)); diff != "" {
				t.Errorf("reply (-want +got):\n%s", diff)
			}
			if got := errCount(r, 0, kindMismatch); got != 2 {
				t.Errorf("mismatches counted = %v, want 2", got)
			}
		})
	}
}

func TestGarbageFromUpstream(t *testing.T) {
	tests := []struct {
		name        string
		garbage     func(req []byte) []byte
		thenAnswer  bool
		wantErr     error
		wantGarbage float64
	}{
		{name: "short datagram", garbage: func([]byte) []byte { return []byte{1, 2, 3} }, thenAnswer: true, wantGarbage: 1},
		{name: "empty datagram", garbage: func([]byte) []byte { return []byte{} }, thenAnswer: true, wantGarbage: 1},
		{
			name: "matching header and question, broken records",
			garbage: func(req []byte) []byte {
				b := append([]byte(nil), req...)
				b[2] |= 0x80                          // QR
				binary.BigEndian.PutUint16(b[6:], 1)  // one answer,
				binary.BigEndian.PutUint16(b[10:], 0) // no OPT
				b = b[:len(b)-11]
				// root A IN TTL 60, rdlength 100 but only 4 bytes of rdata
				return append(b, 0, 0, 1, 0, 1, 0, 0, 0, 60, 0, 100, 192, 0, 2, 1)
			},
			thenAnswer:  true,
			wantGarbage: 1,
		},
		{name: "only garbage", garbage: func([]byte) []byte { return []byte("hello") }, wantErr: ErrUpstreamFailed, wantGarbage: 2},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := rawServer(t, func(req []byte) [][]byte {
				out := [][]byte{tc.garbage(req)}
				if tc.thenAnswer {
					out = append(out, rawReply(t, req, nil))
				}
				return out
			})
			// Two attempts against the one upstream.
			r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}, Timeout: 150 * time.Millisecond})
			q := qwire(t, "g.example.", dns.TypeA)
			b, _, err := r.AppendReply(context.Background(), nil, q)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if err == nil {
				checkContract(t, b, q)
			}
			if got := errCount(r, 0, kindGarbage); got != tc.wantGarbage {
				t.Errorf("garbage counted = %v, want %v", got, tc.wantGarbage)
			}
		})
	}
}

func TestTruncatedRetriedOverTCP(t *testing.T) {
	var answer []string
	for i := range 100 { // ~1.6 KB over TCP, more than 1232
		answer = append(answer, fmt.Sprintf("$QNAME 60 IN A 10.0.%d.%d", i/250, i%250))
	}
	full := answerWith(t, 0, answer, nil)
	srv := newServer(t, func(w dns.ResponseWriter, req *dns.Msg) {
		if w.LocalAddr().Network() == "udp" {
			m := new(dns.Msg)
			m.SetReply(req)
			m.Truncated = true
			_ = w.WriteMsg(m)
			return
		}
		full(w, req)
	})
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}})
	m, _ := ask(t, r, "big.example.", dns.TypeA)
	if len(m.Answer) != 100 {
		t.Errorf("answer has %d records, want 100", len(m.Answer))
	}
	if m.Truncated {
		t.Errorf("reply has TC set")
	}
	if srv.TCP.Load() != 1 {
		t.Errorf("TCP queries %d, want 1", srv.TCP.Load())
	}
	if got := errCount(r, 0, kindTruncated); got != 1 {
		t.Errorf("truncated counted = %v, want 1", got)
	}
	// Over MaxEntrySize (4096 by default)? ~1.6 KB is not: cached.
	if _, src := ask(t, r, "big.example.", dns.TypeA); src != SourceCache {
		t.Errorf("second ask: src %v, want cache", src)
	}
}

func TestMaxEntrySize(t *testing.T) {
	var answer []string
	for i := range 100 {
		answer = append(answer, fmt.Sprintf("$QNAME 60 IN A 10.0.%d.%d", i/250, i%250))
	}
	srv := newServer(t, answerWith(t, 0, answer, nil))
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}, MaxEntrySize: 1000})
	for range 2 {
		if m, src := ask(t, r, "big.example.", dns.TypeA); src != SourceUpstream || len(m.Answer) != 100 {
			t.Errorf("src %v with %d records, want upstream with 100 (too big to cache)", src, len(m.Answer))
		}
	}
}

func TestAllUpstreamsFail(t *testing.T) {
	tests := []struct {
		name     string
		handlers []func(dns.ResponseWriter, *dns.Msg) // nil: nobody listening
		parallel bool
		wantKind string
	}{
		{name: "nobody listening, parallel", handlers: []func(dns.ResponseWriter, *dns.Msg){nil, nil}, parallel: true, wantKind: kindNetwork},
		{name: "nobody listening", handlers: []func(dns.ResponseWriter, *dns.Msg){nil, nil}, wantKind: kindNetwork},
		{name: "SERVFAIL", handlers: []func(dns.ResponseWriter, *dns.Msg){answerWith(t, dns.RcodeServerFailure, nil, nil), answerWith(t, dns.RcodeServerFailure, nil, nil)}, wantKind: kindRcode},
		{name: "REFUSED", handlers: []func(dns.ResponseWriter, *dns.Msg){answerWith(t, dns.RcodeRefused, nil, nil), answerWith(t, dns.RcodeRefused, nil, nil)}, wantKind: kindRcode},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var addrs []string
			for _, h := range tc.handlers {
				if h == nil {
					addrs = append(addrs, deadAddr(t))
				} else {
					addrs = append(addrs, newServer(t, h).Addr)
				}
			}
			r, _ := newTestResolver(t, Config{Upstreams: addrs, Parallel: tc.parallel})
			b, _, err := r.AppendReply(context.Background(), []byte("keep"), qwire(t, "f.example.", dns.TypeA))
			if !errors.Is(err, ErrUpstreamFailed) {
				t.Fatalf("err %v, want ErrUpstreamFailed", err)
			}
			if string(b) != "keep" {
				t.Errorf("dst changed on error: %q", b)
			}
			for i := range addrs {
				if got := errCount(r, i, tc.wantKind); got != 1 {
					t.Errorf("upstream %d: %s errors = %v, want 1", i, tc.wantKind, got)
				}
			}
		})
	}
}

func TestParallelRacePicksFastest(t *testing.T) {
	release := make(chan struct{})
	slowFull := answerWith(t, 0, []string{"$QNAME 60 IN A 192.0.2.100"}, nil)
	slow := newServer(t, func(w dns.ResponseWriter, req *dns.Msg) {
		select {
		case <-release:
		case <-time.After(2 * time.Second):
		}
		slowFull(w, req)
	})
	t.Cleanup(func() { close(release) })
	fast := newServer(t, answerWith(t, 0, []string{"$QNAME 60 IN A 192.0.2.1"}, nil))
	r, _ := newTestResolver(t, Config{Upstreams: []string{slow.Addr, fast.Addr}, Parallel: true, Timeout: 3 * time.Second})
	fixedOrder(r) // sequential tries would wait for the slow one first
	start := time.Now()
	m, _ := ask(t, r, "race.example.", dns.TypeA)
	if d := time.Since(start); d > time.Second {
		t.Errorf("race took %v: waited for the slow upstream", d)
	}
	want := view{Rcode: "NOERROR", Answer: []string{"race.example.\t60\tIN\tA\t192.0.2.1"}}
	if diff := cmp.Diff(want, viewOf(m)); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
	// The slow upstream's try may be cancelled before its query leaves.
	if slow.Queries.Load() > 1 || fast.Queries.Load() != 1 {
		t.Errorf("queries slow=%d fast=%d, want at most 1 and 1", slow.Queries.Load(), fast.Queries.Load())
	}
}

// blockingServer answers only once release is closed.
func blockingServer(t testing.TB) (*server, chan struct{}) {
	release := make(chan struct{})
	full := answerWith(t, 0, []string{"$QNAME 60 IN A 192.0.2.5"}, nil)
	srv := newServer(t, func(w dns.ResponseWriter, req *dns.Msg) {
		<-release
		full(w, req)
	})
	return srv, release
}

func TestCoalescing(t *testing.T) {
	srv, release := blockingServer(t)
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}, Timeout: 5 * time.Second})
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		// Different spellings of one question share the flight.
		name := "same.example."
		if i%2 == 1 {
			name = "SAME.Example."
		}
		q := qwire(t, name, dns.TypeA)
		wg.Go(func() {
			b, src, err := r.AppendReply(context.Background(), nil, q)
			if err == nil && (src != SourceUpstream || string(b[12:12+len(q)]) != string(q)) {
				err = fmt.Errorf("src %v question %q", src, b[12:12+len(q)])
			}
			errs <- err
		})
	}
	waitFor(t, func() bool { return counter(t, &r.metrics.coalesced) == n-1 })
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := srv.Queries.Load(); got != 1 {
		t.Errorf("upstream saw %d queries, want 1", got)
	}
}

func TestOverloaded(t *testing.T) {
	srv, release := blockingServer(t)
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}, MaxConcurrent: 1, Timeout: 5 * time.Second})
	done := make(chan error, 1)
	go func() {
		_, _, err := r.AppendReply(context.Background(), nil, qwire(t, "one.example.", dns.TypeA))
		done <- err
	}()
	waitFor(t, func() bool { return counter(t, &r.metrics.inflight) == 1 })
	_, _, err := r.AppendReply(context.Background(), nil, qwire(t, "two.example.", dns.TypeA))
	if !errors.Is(err, ErrOverloaded) {
		t.Errorf("second question: err %v, want ErrOverloaded", err)
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("first question: %v", err)
	}
	if got := counter(t, &r.metrics.overload); got != 1 {
		t.Errorf("overloaded counted = %v, want 1", got)
	}
	// The bound frees up again.
	if _, _, err := r.AppendReply(context.Background(), nil, qwire(t, "three.example.", dns.TypeA)); err != nil {
		t.Errorf("after release: %v", err)
	}
}

func TestContextAndClose(t *testing.T) {
	srv, release := blockingServer(t)
	defer close(release)
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}, Timeout: 5 * time.Second})

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := r.AppendReply(ctx, nil, qwire(t, "slow.example.", dns.TypeA)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("caller deadline: err %v, want DeadlineExceeded", err)
	}
	// Close cancels the flight still waiting on the server.
	start := time.Now()
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := r.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, _, err := r.AppendReply(context.Background(), nil, qwire(t, "after.example.", dns.TypeA)); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: err %v, want ErrClosed", err)
	}
}

func TestBadQuestion(t *testing.T) {
	r, _ := newTestResolver(t, Config{Upstreams: []string{"127.0.0.1:1"}})
	long := make([]byte, 0, 300)
	for range 5 {
		long = append(long, 63)
		long = append(long, make([]byte, 63)...)
	}
	long = append(long, 0, 0, 1, 0, 1)
	tests := []struct {
		name  string
		qwire []byte
	}{
		{name: "empty", qwire: nil},
		{name: "no type and class", qwire: []byte{3, 'c', 'o', 'm', 0}},
		{name: "trailing bytes", qwire: []byte{3, 'c', 'o', 'm', 0, 0, 1, 0, 1, 9}},
		{name: "compression pointer", qwire: []byte{0xC0, 12, 0, 1, 0, 1}},
		{name: "label past end", qwire: []byte{9, 'c', 'o', 'm', 0, 0, 1, 0, 1}},
		{name: "name over 255", qwire: long},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, _, err := r.AppendReply(context.Background(), nil, tc.qwire); !errors.Is(err, ErrBadQuestion) {
				t.Errorf("err %v, want ErrBadQuestion", err)
			}
		})
	}
}

func TestNewValidates(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{name: "no upstreams", cfg: Config{}},
		{name: "hostname", cfg: Config{Upstreams: []string{"dns.example:53"}}},
		{name: "unknown scheme", cfg: Config{Upstreams: []string{"https://127.0.0.1/dns-query"}}},
		{name: "max below min", cfg: Config{Upstreams: []string{"127.0.0.1:53"}, MinTTL: time.Hour, MaxTTL: time.Minute}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg); err == nil {
				t.Error("New accepted a bad config")
			}
		})
	}
}

func TestSourceString(t *testing.T) {
	got := []string{SourceCache.String(), SourceUpstream.String()}
	if diff := cmp.Diff([]string{"cache", "upstream"}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}

// waitFor polls cond for up to 5s; used only to wait for goroutines to reach
// a state, never to let time pass.
func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, "the condition", 5*time.Second, cond)
}

func TestLowerQuestion(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		want    []byte
		wantLen int
	}{
		{name: "root", in: []byte{0, 0, 1, 0, 1}, want: []byte{0, 0, 1, 0, 1}, wantLen: 1},
		{name: "mixed case", in: []byte("\x03WwW\x07ExAMPLE\x00\x00\x01\x00\x01"), want: []byte("\x03www\x07example\x00\x00\x01\x00\x01"), wantLen: 13},
		{name: "type and class untouched", in: []byte("\x01A\x00\x00\x41\x00\x5A"), want: []byte("\x01a\x00\x00\x41\x00\x5A"), wantLen: 3},
		{name: "binary label bytes", in: []byte("\x02\x00\xff\x00\x00\x01\x00\x01"), want: []byte("\x02\x00\xff\x00\x00\x01\x00\x01"), wantLen: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var kb [maxQuestion]byte
			n, err := lowerQuestion(&kb, tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if n != tc.wantLen {
				t.Errorf("name length %d, want %d", n, tc.wantLen)
			}
			if diff := cmp.Diff(tc.want, kb[:len(tc.in)]); diff != "" {
				t.Errorf("key (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzLowerQuestion checks the hand-written question parser against miekg.
func FuzzLowerQuestion(f *testing.F) {
	f.Add([]byte("\x03www\x07example\x00\x00\x01\x00\x01"))
	f.Add([]byte{0xC0, 12, 0, 1, 0, 1})
	f.Add([]byte{0, 0, 1, 0, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		var kb [maxQuestion]byte
		n, err := lowerQuestion(&kb, in)
		if err != nil {
			return
		}
		name, off, err := dns.UnpackDomainName(in, 0)
		if err != nil || off != n || len(in) != n+4 {
			t.Fatalf("accepted %q; miekg: name %q off %d err %v", in, name, off, err)
		}
		lname, _, err := dns.UnpackDomainName(kb[:n], 0)
		if err != nil || !strings.EqualFold(lname, name) {
			t.Fatalf("key name %q, want %q folded (err %v)", lname, name, err)
		}
	})
}

// TestTryDeadlineCoversTCP checks that the window (the client's timeout
// less 4%) bounds a whole try: a server that truncates over UDP and never
// answers over TCP fails the try when the window ends, counted as a
// timeout.
func TestTryDeadlineCoversTCP(t *testing.T) {
	release := make(chan struct{})
	srv := newServer(t, func(w dns.ResponseWriter, req *dns.Msg) {
		if w.LocalAddr().Network() == "tcp" {
			<-release
			return
		}
		time.Sleep(900 * time.Millisecond) // spend most of the try on UDP
		m := new(dns.Msg)
		m.SetReply(req)
		m.Truncated = true
		_ = w.WriteMsg(m)
	})
	defer close(release)
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}, Attempts: 1, Timeout: time.Second, ClientTimeout: time.Second})
	start := time.Now()
	_, _, err := r.AppendReply(context.Background(), nil, qwire(t, "tcp.example.", dns.TypeA))
	if !errors.Is(err, ErrUpstreamFailed) {
		t.Fatalf("err %v, want ErrUpstreamFailed", err)
	}
	// A fresh Timeout for TCP would make it ~1.9s.
	if d := time.Since(start); d > 1500*time.Millisecond {
		t.Errorf("try took %v, want about the 960ms window", d)
	}
	if got := errCount(r, 0, kindTimeout); got != 1 {
		t.Errorf("timeouts %v, want 1", got)
	}
}

func TestNoEDNSUpstream(t *testing.T) {
	var withOPT, without atomic.Int64
	srv := rawServer(t, func(req []byte) [][]byte {
		q := new(dns.Msg)
		if err := q.Unpack(req); err != nil {
			t.Errorf("server: %v", err)
			return nil
		}
		if q.IsEdns0() != nil {
			withOPT.Add(1)
			return [][]byte{rawReply(t, req, func(m *dns.Msg) { m.Rcode = dns.RcodeFormatError; m.Answer = nil })}
		}
		without.Add(1)
		return [][]byte{rawReply(t, req, nil)}
	})
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}})
	m, _ := ask(t, r, "old.example.", dns.TypeA)
	want := view{Rcode: "NOERROR", Answer: []string{"old.example.\t60\tIN\tA\t192.0.2.9"}}
	if diff := cmp.Diff(want, viewOf(m)); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
	if withOPT.Load() != 1 || without.Load() != 1 {
		t.Errorf("queries with OPT %d, without %d; want 1 and 1", withOPT.Load(), without.Load())
	}
	if got := errCount(r, 0, kindFormerr); got != 1 {
		t.Errorf("formerr counted %v, want 1", got)
	}
}

// TestReplyFromOtherAddressIgnored: a correct-looking reply (right ID and
// question) sent from another port than the upstream's never reaches the
// resolver, because each query's socket is connected to its upstream; a
// spoofer must also forge the source address. The real reply that follows
// is taken.
func TestReplyFromOtherAddressIgnored(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	other, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer other.Close()
	defer pc.Close()
	wg.Go(func() {
		buf := make([]byte, 512)
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		req := buf[:n]
		spoof := rawReply(t, req, func(m *dns.Msg) {
			m.Answer = []dns.RR{mustRR(t, m.Question[0].Name+" 60 IN A 203.0.113.66")}
		})
		_, _ = other.WriteTo(spoof, from)
		time.Sleep(50 * time.Millisecond) // let the spoof arrive first
		_, _ = pc.WriteTo(rawReply(t, req, nil), from)
	})
	r, _ := newTestResolver(t, Config{Upstreams: []string{pc.LocalAddr().String()}, Attempts: 1, Timeout: time.Second})
	m, _ := ask(t, r, "real.example.", dns.TypeA)
	want := view{Rcode: "NOERROR", Answer: []string{"real.example.\t60\tIN\tA\t192.0.2.9"}}
	if diff := cmp.Diff(want, viewOf(m)); diff != "" {
		t.Errorf("reply (-want +got):\n%s", diff)
	}
	if got := errCount(r, 0, kindMismatch) + errCount(r, 0, kindGarbage); got != 0 {
		t.Errorf("the spoof reached the resolver (%v mismatches/garbage counted)", got)
	}
}

// TestOversizedUDPReplyRetriedOverTCP: the try's buffer is the EDNS size
// we ask for (1232) plus one byte. An upstream that ignores it and sends a
// bigger datagram without TC gets the question again over TCP, whose
// buffer grows to the reply, so the client still gets every record.
func TestOversizedUDPReplyRetriedOverTCP(t *testing.T) {
	var answer []string
	for i := range 150 { // ~2.4 KB, over 1232 on UDP and over the buffer
		answer = append(answer, fmt.Sprintf("$QNAME 60 IN A 10.1.%d.%d", i/250, i%250))
	}
	srv := newServer(t, answerWith(t, 0, answer, nil)) // UDP too: no truncation
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}})
	m, _ := ask(t, r, "oversized.example.", dns.TypeA)
	if len(m.Answer) != 150 {
		t.Errorf("answer has %d records, want 150", len(m.Answer))
	}
	if srv.TCP.Load() != 1 {
		t.Errorf("TCP queries %d, want 1", srv.TCP.Load())
	}
}
