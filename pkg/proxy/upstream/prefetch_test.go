package upstream

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// namesServer answers every A question with TTL 100 and counts the
// questions per name; block, when set, holds the answers to names it
// reports true for until release is closed.
type namesServer struct {
	*server
	mu    sync.Mutex
	asked map[string]int
}

func newNamesServer(t testing.TB, block func(name string) bool, release <-chan struct{}) *namesServer {
	s := &namesServer{asked: map[string]int{}}
	reply := answerWith(t, dns.RcodeSuccess, []string{"$QNAME 100 IN A 192.0.2.1"}, nil)
	s.server = newServer(t, func(w dns.ResponseWriter, req *dns.Msg) {
		name := strings.ToLower(req.Question[0].Name)
		s.mu.Lock()
		s.asked[name]++
		s.mu.Unlock()
		if block != nil && block(name) {
			<-release
		}
		reply(w, req)
	})
	return s
}

func (s *namesServer) count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.asked[name]
}

// until polls cond; the test's own timeout bounds it (a loaded machine
// is slow, not wrong).
func until(cond func() bool) {
	for !cond() {
		time.Sleep(5 * time.Millisecond)
	}
}

// peekTTL is the TTL left of name's fresh cached reply, or -1.
func peekTTL(r *Resolver, name string) int {
	m, ok := r.Peek(dns.Question{Name: name, Qtype: dns.TypeA, Qclass: dns.ClassINET})
	if !ok || len(m.Answer) == 0 {
		return -1
	}
	return int(m.Answer[0].Header().Ttl)
}

// TestPrefetch: a name asked Prefetch times in a row is refreshed by the
// hit that finds 10% of its TTL left, before it expires, and answered from
// the cache across its TTL boundary; a name asked less often is not.
func TestPrefetch(t *testing.T) {
	srv := newNamesServer(t, nil, nil)
	clk := newClock()
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}, Now: clk.Now, Prefetch: 3, PrefetchWindow: 2 * time.Minute, Timeout: time.Minute})
	const hot, cold = "hot.example.", "cold.example."
	ask(t, r, hot, dns.TypeA) // the miss
	ask(t, r, hot, dns.TypeA) // hit 1
	ask(t, r, hot, dns.TypeA) // hit 2
	ask(t, r, cold, dns.TypeA)

	clk.Advance(85 * time.Second)
	ask(t, r, hot, dns.TypeA) // hit 3, 15s left of 100: not yet
	if n := counter(t, &r.metrics.prefetches); n != 0 {
		t.Fatalf("prefetches with 15%% of the TTL left: %v, want 0", n)
	}

	clk.Advance(5 * time.Second)
	if _, src := ask(t, r, hot, dns.TypeA); src != SourceCache { // hit 4, 10s left: refresh
		t.Errorf("hot at 90s: from %v, want cache", src)
	}
	ask(t, r, cold, dns.TypeA) // hit 1 only
	until(func() bool { return peekTTL(r, hot) == 100 })
	if n := srv.count(hot); n != 2 {
		t.Errorf("upstream asked for hot %d times, want 2 (the miss and one prefetch)", n)
	}

	clk.Advance(15 * time.Second) // past the first reply's expiry
	m, src := ask(t, r, hot, dns.TypeA)
	if src != SourceCache || m.Answer[0].Header().Ttl != 85 {
		t.Errorf("hot at 105s: from %v with TTL %d, want cache with 85", src, m.Answer[0].Header().Ttl)
	}
	if _, src := ask(t, r, cold, dns.TypeA); src != SourceUpstream {
		t.Errorf("cold at 105s: from %v, want upstream (expired, never prefetched)", src)
	}
	if n := srv.count(cold); n != 2 {
		t.Errorf("upstream asked for cold %d times, want 2", n)
	}
	if n := counter(t, &r.metrics.prefetches); n != 1 {
		t.Errorf("prefetches %v, want 1", n)
	}

	// The refreshed entry inherited the hits: hot at its next threshold
	// is refreshed again without three more hits first.
	clk.Advance(76 * time.Second) // 9s left of the refresh's 100
	ask(t, r, hot, dns.TypeA)
	until(func() bool { return peekTTL(r, hot) == 100 })
	if n := srv.count(hot); n != 3 {
		t.Errorf("upstream asked for hot %d times, want 3", n)
	}
}

// TestPrefetchBounded: with MaxPrefetches refreshes in flight a hot name
// is not refreshed (counted), and is refreshed by a later hit once there
// is room again.
func TestPrefetchBounded(t *testing.T) {
	release := make(chan struct{})
	var blocking sync.Mutex
	blocked := false
	srv := newNamesServer(t, func(name string) bool {
		blocking.Lock()
		defer blocking.Unlock()
		return blocked && name == "a.example."
	}, release)
	clk := newClock()
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}, Now: clk.Now, Prefetch: 1, MaxPrefetches: 1, Timeout: time.Minute})
	for _, n := range []string{"a.example.", "b.example."} {
		ask(t, r, n, dns.TypeA)
	}
	blocking.Lock()
	blocked = true
	blocking.Unlock()
	clk.Advance(95 * time.Second)
	ask(t, r, "a.example.", dns.TypeA) // starts a refresh that hangs
	until(func() bool { return srv.count("a.example.") == 2 })
	ask(t, r, "b.example.", dns.TypeA) // no room
	if n := counter(t, &r.metrics.prefetchSkipped); n != 1 {
		t.Errorf("skipped %v, want 1", n)
	}
	if n := srv.count("b.example."); n != 1 {
		t.Errorf("b asked %d times, want 1 (not refreshed)", n)
	}
	close(release)
	until(func() bool { return peekTTL(r, "a.example.") == 100 })
	ask(t, r, "b.example.", dns.TypeA)
	until(func() bool { return peekTTL(r, "b.example.") == 100 })
	if n := counter(t, &r.metrics.prefetches); n != 2 {
		t.Errorf("prefetches %v, want 2", n)
	}
}
