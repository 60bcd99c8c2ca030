package upstream

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// step is one question in a cache scenario, asked after the clock moved.
type step struct {
	advance time.Duration
	qname   string // zero: "c.example."
	want    view
	wantSrc Source
	wantErr error
}

func runSteps(t *testing.T, r *Resolver, clk *clock, steps []step) {
	t.Helper()
	for i, s := range steps {
		clk.Advance(s.advance)
		name := s.qname
		if name == "" {
			name = "c.example."
		}
		q := qwire(t, name, dns.TypeA)
		b, src, err := r.AppendReply(context.Background(), nil, q)
		if !errors.Is(err, s.wantErr) {
			t.Fatalf("step %d (+%v): err %v, want %v", i, s.advance, err, s.wantErr)
		}
		if err != nil {
			continue
		}
		checkContract(t, b, q)
		m := new(dns.Msg)
		if err := m.Unpack(b); err != nil {
			t.Fatalf("step %d: unpack: %v", i, err)
		}
		if diff := cmp.Diff(s.want, viewOf(m)); diff != "" {
			t.Errorf("step %d (+%v): reply (-want +got):\n%s", i, s.advance, diff)
		}
		if src != s.wantSrc {
			t.Errorf("step %d (+%v): source %v, want %v", i, s.advance, src, s.wantSrc)
		}
	}
}

func a(name string, ttl int) view {
	return view{Rcode: "NOERROR", Answer: []string{fmt.Sprintf("%s\t%d\tIN\tA\t192.0.2.1", name, ttl)}}
}

const soa = "example. %d IN SOA ns.example. host.example. 1 7200 900 1209600 %d"

func nx(ttl int) view {
	return view{Rcode: "NXDOMAIN", Ns: []string{fmt.Sprintf("example.\t%d\tIN\tSOA\tns.example. host.example. 1 7200 900 1209600 30", ttl)}}
}

func TestCache(t *testing.T) {
	tests := []struct {
		name          string
		cfg           Config
		rcode         int
		answer, ns    []string
		steps         []step
		wantQueries   int64
		wantHits      float64
		wantEvictions float64
	}{
		{
			name:   "hit counts the TTL down, expiry asks again",
			answer: []string{"$QNAME 60 IN A 192.0.2.1"},
			steps: []step{
				{want: a("c.example.", 60), wantSrc: SourceUpstream},
				{advance: 10 * time.Second, want: a("c.example.", 50), wantSrc: SourceCache},
				{advance: 49999 * time.Millisecond, want: a("c.example.", 1), wantSrc: SourceCache},
				{advance: time.Millisecond, want: a("c.example.", 60), wantSrc: SourceUpstream},
			},
			wantQueries: 2,
			wantHits:    2,
		},
		{
			name:   "hit echoes the question's case",
			answer: []string{"$QNAME 60 IN A 192.0.2.1"},
			steps: []step{
				{qname: "c.example.", want: a("c.example.", 60), wantSrc: SourceUpstream},
				{qname: "C.eXample.", want: a("C.eXample.", 60), wantSrc: SourceCache},
			},
			wantQueries: 1,
			wantHits:    1,
		},
		{
			name:   "smallest TTL of the reply wins",
			answer: []string{"$QNAME 300 IN A 192.0.2.1"},
			ns:     []string{"example. 20 IN NS ns.example."},
			steps: []step{
				{want: view{Rcode: "NOERROR", Answer: []string{"c.example.\t20\tIN\tA\t192.0.2.1"}, Ns: []string{"example.\t20\tIN\tNS\tns.example."}}, wantSrc: SourceUpstream},
				{advance: 21 * time.Second, want: view{Rcode: "NOERROR", Answer: []string{"c.example.\t20\tIN\tA\t192.0.2.1"}, Ns: []string{"example.\t20\tIN\tNS\tns.example."}}, wantSrc: SourceUpstream},
			},
			wantQueries: 2,
		},
		{
			name:   "min TTL raises",
			cfg:    Config{MinTTL: 30 * time.Second},
			answer: []string{"$QNAME 5 IN A 192.0.2.1"},
			steps: []step{
				{want: a("c.example.", 30), wantSrc: SourceUpstream},
				{advance: 20 * time.Second, want: a("c.example.", 10), wantSrc: SourceCache},
			},
			wantQueries: 1,
			wantHits:    1,
		},
		{
			name:   "max TTL caps",
			cfg:    Config{MaxTTL: 100 * time.Second},
			answer: []string{"$QNAME 3600 IN A 192.0.2.1"},
			steps: []step{
				{want: a("c.example.", 100), wantSrc: SourceUpstream},
				{advance: 99 * time.Second, want: a("c.example.", 1), wantSrc: SourceCache},
				{advance: time.Second, want: a("c.example.", 100), wantSrc: SourceUpstream},
			},
			wantQueries: 2,
			wantHits:    1,
		},
		{
			name:   "TTL 0 is not cached",
			answer: []string{"$QNAME 0 IN A 192.0.2.1"},
			steps: []step{
				{want: a("c.example.", 0), wantSrc: SourceUpstream},
				{want: a("c.example.", 0), wantSrc: SourceUpstream},
			},
			wantQueries: 2,
		},
		{
			name:  "NXDOMAIN cached for the SOA minimum",
			rcode: dns.RcodeNameError,
			ns:    []string{fmt.Sprintf(soa, 300, 30)},
			steps: []step{
				{want: nx(30), wantSrc: SourceUpstream},
				{advance: 29 * time.Second, want: nx(1), wantSrc: SourceCache},
				{advance: time.Second, want: nx(30), wantSrc: SourceUpstream},
			},
			wantQueries: 2,
			wantHits:    1,
		},
		{
			name:  "NXDOMAIN cached for the SOA TTL when smaller",
			rcode: dns.RcodeNameError,
			ns:    []string{fmt.Sprintf(soa, 10, 30)},
			steps: []step{
				{want: view{Rcode: "NXDOMAIN", Ns: []string{"example.\t10\tIN\tSOA\tns.example. host.example. 1 7200 900 1209600 30"}}, wantSrc: SourceUpstream},
				{advance: 9 * time.Second, want: view{Rcode: "NXDOMAIN", Ns: []string{"example.\t1\tIN\tSOA\tns.example. host.example. 1 7200 900 1209600 30"}}, wantSrc: SourceCache},
			},
			wantQueries: 1,
			wantHits:    1,
		},
		{
			name:  "negative TTL capped",
			cfg:   Config{MaxNegativeTTL: 5 * time.Second},
			rcode: dns.RcodeNameError,
			ns:    []string{fmt.Sprintf(soa, 300, 30)},
			steps: []step{
				{want: nx(5), wantSrc: SourceUpstream},
				{advance: 5 * time.Second, want: nx(5), wantSrc: SourceUpstream},
			},
			wantQueries: 2,
		},
		{
			name: "NODATA cached",
			ns:   []string{fmt.Sprintf(soa, 300, 30)},
			steps: []step{
				{want: view{Rcode: "NOERROR", Ns: []string{"example.\t30\tIN\tSOA\tns.example. host.example. 1 7200 900 1209600 30"}}, wantSrc: SourceUpstream},
				{advance: 10 * time.Second, want: view{Rcode: "NOERROR", Ns: []string{"example.\t20\tIN\tSOA\tns.example. host.example. 1 7200 900 1209600 30"}}, wantSrc: SourceCache},
			},
			wantQueries: 1,
			wantHits:    1,
		},
		{
			name:  "NXDOMAIN without SOA not cached",
			rcode: dns.RcodeNameError,
			steps: []step{
				{want: view{Rcode: "NXDOMAIN"}, wantSrc: SourceUpstream},
				{want: view{Rcode: "NXDOMAIN"}, wantSrc: SourceUpstream},
			},
			wantQueries: 2,
		},
		{
			name:  "FORMERR not cached",
			rcode: dns.RcodeFormatError,
			steps: []step{
				{want: view{Rcode: "FORMERR"}, wantSrc: SourceUpstream},
				{want: view{Rcode: "FORMERR"}, wantSrc: SourceUpstream},
			},
			wantQueries: 2,
		},
		{
			name:   "eviction at the size bound",
			cfg:    Config{CacheSize: 2},
			answer: []string{"$QNAME 60 IN A 192.0.2.1"},
			steps: []step{
				{qname: "e1.example.", want: a("e1.example.", 60), wantSrc: SourceUpstream},
				{qname: "e2.example.", want: a("e2.example.", 60), wantSrc: SourceUpstream},
				{qname: "e3.example.", want: a("e3.example.", 60), wantSrc: SourceUpstream},
				{qname: "e4.example.", want: a("e4.example.", 60), wantSrc: SourceUpstream},
			},
			wantQueries:   4,
			wantEvictions: 2,
		},
		{
			name:   "cache off",
			cfg:    Config{CacheSize: -1},
			answer: []string{"$QNAME 60 IN A 192.0.2.1"},
			steps: []step{
				{want: a("c.example.", 60), wantSrc: SourceUpstream},
				{want: a("c.example.", 60), wantSrc: SourceUpstream},
			},
			wantQueries: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv := newServer(t, answerWith(t, tc.rcode, tc.answer, tc.ns))
			clk := newClock()
			tc.cfg.Upstreams = []string{srv.Addr}
			tc.cfg.Now = clk.Now
			r, _ := newTestResolver(t, tc.cfg)
			runSteps(t, r, clk, tc.steps)
			if got := srv.Queries.Load(); got != tc.wantQueries {
				t.Errorf("upstream queries %d, want %d", got, tc.wantQueries)
			}
			if got := counter(t, &r.metrics.hits); got != tc.wantHits {
				t.Errorf("hits %v, want %v", got, tc.wantHits)
			}
			if got := counter(t, &r.metrics.misses); got != float64(len(tc.steps))-tc.wantHits {
				t.Errorf("misses %v, want %v", got, float64(len(tc.steps))-tc.wantHits)
			}
			if got := counter(t, &r.metrics.evictions); got != tc.wantEvictions {
				t.Errorf("evictions %v, want %v", got, tc.wantEvictions)
			}
			if tc.cfg.CacheSize > 0 {
				if got := counter(t, r.metrics.entries); got != float64(tc.cfg.CacheSize) {
					t.Errorf("entries %v, want %v (full)", got, tc.cfg.CacheSize)
				}
			}
		})
	}
}

// flakyServer answers A 192.0.2.1 TTL 60 while up is true, else SERVFAIL or
// silence.
func flakyServer(t testing.TB, silent bool) (*server, *atomic.Bool) {
	var up atomic.Bool
	up.Store(true)
	good := answerWith(t, 0, []string{"$QNAME 60 IN A 192.0.2.1"}, nil)
	bad := answerWith(t, dns.RcodeServerFailure, nil, nil)
	srv := newServer(t, func(w dns.ResponseWriter, req *dns.Msg) {
		switch {
		case up.Load():
			good(w, req)
		case !silent:
			bad(w, req)
		}
	})
	return srv, &up
}

func TestServeStale(t *testing.T) {
	tests := []struct {
		name      string
		cfg       Config
		silent    bool
		steps     []step
		wantStale float64
	}{
		{
			name: "SERVFAIL upstream, stale within the window",
			steps: []step{
				{want: a("c.example.", 60), wantSrc: SourceUpstream},
				{advance: 2 * time.Minute, want: a("c.example.", 30), wantSrc: SourceCache},
				{advance: 50 * time.Minute, want: a("c.example.", 30), wantSrc: SourceCache},
				{advance: 10 * time.Minute, wantErr: ErrUpstreamFailed},
			},
			wantStale: 2,
		},
		{
			name:   "silent upstream, custom stale TTL",
			cfg:    Config{StaleTTL: 5 * time.Second, Timeout: 100 * time.Millisecond},
			silent: true,
			steps: []step{
				{want: a("c.example.", 60), wantSrc: SourceUpstream},
				{advance: 61 * time.Second, want: a("c.example.", 5), wantSrc: SourceCache},
			},
			wantStale: 1,
		},
		{
			name: "serve-stale off",
			cfg:  Config{StaleWindow: -1},
			steps: []step{
				{want: a("c.example.", 60), wantSrc: SourceUpstream},
				{advance: 61 * time.Second, wantErr: ErrUpstreamFailed},
			},
		},
		{
			name: "fresh entries never need stale",
			steps: []step{
				{want: a("c.example.", 60), wantSrc: SourceUpstream},
				{advance: 30 * time.Second, want: a("c.example.", 30), wantSrc: SourceCache},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, up := flakyServer(t, tc.silent)
			clk := newClock()
			tc.cfg.Upstreams = []string{srv.Addr}
			tc.cfg.Now = clk.Now
			r, _ := newTestResolver(t, tc.cfg)
			runSteps(t, r, clk, tc.steps[:1])
			up.Store(false)
			runSteps(t, r, clk, tc.steps[1:])
			if got := counter(t, &r.metrics.stale); got != tc.wantStale {
				t.Errorf("stale served %v, want %v", got, tc.wantStale)
			}
		})
	}
}

func TestServeStaleWhenOverloaded(t *testing.T) {
	srv, release := blockingServer(t)
	clk := newClock()
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}, MaxConcurrent: 1, Timeout: 5 * time.Second, Now: clk.Now})
	close(release)
	runSteps(t, r, clk, []step{{qname: "s.example.", want: view{Rcode: "NOERROR", Answer: []string{"s.example.\t60\tIN\tA\t192.0.2.5"}}, wantSrc: SourceUpstream}})
	// Hold the only slot with a question the server never answers.
	block := rawServer(t, func([]byte) [][]byte { return nil })
	r.ups[0].addr, r.ups[0].ip = block.Addr, netip.MustParseAddrPort(block.Addr)
	done := make(chan error, 1)
	go func() {
		_, _, err := r.AppendReply(context.Background(), nil, qwire(t, "held.example.", dns.TypeA))
		done <- err
	}()
	waitFor(t, func() bool { return counter(t, &r.metrics.inflight) == 1 })
	runSteps(t, r, clk, []step{
		{advance: 2 * time.Minute, qname: "s.example.", want: view{Rcode: "NOERROR", Answer: []string{"s.example.\t30\tIN\tA\t192.0.2.5"}}, wantSrc: SourceCache},
		{qname: "other.example.", wantErr: ErrOverloaded},
	})
	r.Close()
	<-done
}

func TestServfailNotCached(t *testing.T) {
	srv, up := flakyServer(t, false)
	up.Store(false)
	clk := newClock()
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}, Now: clk.Now})
	runSteps(t, r, clk, []step{{wantErr: ErrUpstreamFailed}})
	up.Store(true)
	runSteps(t, r, clk, []step{{want: a("c.example.", 60), wantSrc: SourceUpstream}})
}

func TestExchangeAndPeek(t *testing.T) {
	srv := newServer(t, answerWith(t, 0, []string{"$QNAME 60 IN A 192.0.2.1"}, nil))
	clk := newClock()
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}, Now: clk.Now})
	q := dns.Question{Name: "X.example.", Qtype: dns.TypeA, Qclass: dns.ClassINET}

	if _, ok := r.Peek(q); ok {
		t.Error("Peek found something before any query")
	}
	m, src, err := r.Exchange(context.Background(), q)
	if err != nil {
		t.Fatalf("Exchange: %v", err)
	}
	if diff := cmp.Diff(a("X.example.", 60), viewOf(m)); diff != "" || src != SourceUpstream {
		t.Errorf("first Exchange src %v (-want +got):\n%s", src, diff)
	}
	clk.Advance(15 * time.Second)
	m, ok := r.Peek(dns.Question{Name: "x.EXAMPLE.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	if !ok {
		t.Fatal("Peek found nothing after Exchange")
	}
	if diff := cmp.Diff(a("x.EXAMPLE.", 45), viewOf(m)); diff != "" {
		t.Errorf("Peek (-want +got):\n%s", diff)
	}
	if _, src, _ := r.Exchange(context.Background(), q); src != SourceCache {
		t.Errorf("second Exchange src %v, want cache", src)
	}
	if _, ok := r.Peek(dns.Question{Name: "x.example.", Qtype: dns.TypeAAAA, Qclass: dns.ClassINET}); ok {
		t.Error("Peek found AAAA that was never asked")
	}
	if srv.Queries.Load() != 1 {
		t.Errorf("upstream queries %d, want 1", srv.Queries.Load())
	}
}

// TestCacheHitAllocatesNothing is the README's promise ("cache hits allocate
// nothing per query") as a test; the benchmark reports the same figure.
func TestCacheHitAllocatesNothing(t *testing.T) {
	srv := newServer(t, answerWith(t, 0, []string{"$QNAME 60 IN A 192.0.2.1", "$QNAME 60 IN A 192.0.2.2"}, nil))
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}})
	q := qwire(t, "alloc.example.", dns.TypeA)
	ctx := context.Background()
	if _, _, err := r.AppendReply(ctx, nil, q); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 0, 512)
	allocs := testing.AllocsPerRun(1000, func() {
		if _, src, err := r.AppendReply(ctx, buf[:0], q); err != nil || src != SourceCache {
			t.Fatalf("src %v err %v", src, err)
		}
	})
	if allocs != 0 {
		t.Errorf("cache hit allocates %v times, want 0", allocs)
	}
}

// TestDoneContextHitOnly is the contract pkg/proxy relies on to answer hits
// on its reader goroutine: with a done ctx a hit is answered and a miss fails
// at once without reaching upstream or counting a miss.
func TestDoneContextHitOnly(t *testing.T) {
	srv := newServer(t, answerWith(t, 0, []string{"$QNAME 60 IN A 192.0.2.1"}, nil))
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}})
	done, cancel := context.WithCancel(context.Background())
	cancel()

	q := qwire(t, "hot.example.", dns.TypeA)
	if _, _, err := r.AppendReply(done, nil, q); !errors.Is(err, context.Canceled) {
		t.Fatalf("miss with done ctx: err %v, want Canceled", err)
	}
	if got := srv.Queries.Load(); got != 0 {
		t.Errorf("miss with done ctx sent %d upstream queries", got)
	}
	if got := counter(t, &r.metrics.misses); got != 0 {
		t.Errorf("misses %v, want 0", got)
	}
	ask(t, r, "hot.example.", dns.TypeA)
	b, src, err := r.AppendReply(done, nil, q)
	if err != nil || src != SourceCache {
		t.Fatalf("hit with done ctx: src %v err %v", src, err)
	}
	checkContract(t, b, q)
}

// TestStaleAnswerTimer: with an expired entry and an upstream slower than
// StaleAnswerAfter, the asker gets the stale answer at the timer, and the
// refresh still lands in the cache.
func TestStaleAnswerTimer(t *testing.T) {
	var slow atomic.Bool
	release := make(chan struct{})
	good := answerWith(t, 0, []string{"$QNAME 60 IN A 192.0.2.1"}, nil)
	srv := newServer(t, func(w dns.ResponseWriter, req *dns.Msg) {
		if slow.Load() {
			<-release
		}
		good(w, req)
	})
	clk := newClock()
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}, Now: clk.Now, Timeout: 5 * time.Second, StaleAnswerAfter: 100 * time.Millisecond})
	runSteps(t, r, clk, []step{{want: a("c.example.", 60), wantSrc: SourceUpstream}})
	slow.Store(true)
	clk.Advance(2 * time.Minute)
	start := time.Now()
	runSteps(t, r, clk, []step{{want: a("c.example.", 30), wantSrc: SourceCache}})
	if d := time.Since(start); d < 100*time.Millisecond || d > time.Second {
		t.Errorf("stale answer after %v, want about 100ms", d)
	}
	if got := counter(t, &r.metrics.stale); got != 1 {
		t.Errorf("stale served %v, want 1", got)
	}
	close(release)
	waitFor(t, func() bool {
		_, ok := r.Peek(dns.Question{Name: "c.example.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
		return ok
	})
	runSteps(t, r, clk, []step{{want: a("c.example.", 60), wantSrc: SourceCache}})
	if got := srv.Queries.Load(); got != 2 {
		t.Errorf("upstream queries %d, want 2", got)
	}
}

// TestAppendCached checks the proxy's reader-side probe: a miss answers
// nothing, sends nothing upstream and counts no miss; a hit is the same
// reply AppendReply gives and allocates nothing.
func TestAppendCached(t *testing.T) {
	srv := newServer(t, answerWith(t, 0, []string{"$QNAME 60 IN A 192.0.2.1"}, nil))
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}})
	q := qwire(t, "Probe.Example.", dns.TypeA)
	key := qwire(t, "probe.example.", dns.TypeA)
	var p Probe
	if out, _, ok := r.AppendCached(nil, q, key, &p); ok || len(out) != 0 {
		t.Fatalf("AppendCached on an empty cache: ok %v, %d bytes", ok, len(out))
	}
	if got := counter(t, &r.metrics.misses); got != 0 {
		t.Errorf("misses after a probe %v, want 0", got)
	}
	want, _, err := r.AppendReply(context.Background(), nil, q)
	if err != nil {
		t.Fatal(err)
	}
	got, src, ok := r.AppendCached(nil, q, key, &p)
	if !ok || src != SourceCache {
		t.Fatalf("AppendCached after AppendReply: ok %v src %v", ok, src)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("AppendCached differs from AppendReply (-want +got):\n%s", diff)
	}
	if n := srv.Queries.Load(); n != 1 {
		t.Errorf("upstream queries %d, want 1", n)
	}
	if got := counter(t, &r.metrics.misses); got != 1 {
		t.Errorf("misses %v, want 1", got)
	}
	buf := make([]byte, 0, 512)
	if allocs := testing.AllocsPerRun(1000, func() { r.AppendCached(buf[:0], q, key, &p) }); allocs != 0 {
		t.Errorf("AppendCached hit allocates %v times, want 0", allocs)
	}
}
