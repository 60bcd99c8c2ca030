package upstream

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/internal/proxymetrics"
)

// delayedServer answers only the first query it gets, after delay, with
// an A record; later queries (the retries) are ignored, so an answer
// proves the first try's late reply was taken.
func delayedServer(t testing.TB, delay time.Duration) *server {
	t.Helper()
	var first atomic.Bool
	return newServer(t, func(w dns.ResponseWriter, req *dns.Msg) {
		if !first.CompareAndSwap(false, true) {
			return
		}
		time.Sleep(delay)
		m := new(dns.Msg)
		m.SetReply(req)
		rr, _ := dns.NewRR(req.Question[0].Name + " 60 IN A 192.0.2.1")
		m.Answer = append(m.Answer, rr)
		_ = w.WriteMsg(m)
	})
}

// TestAttemptSchedule runs the schedule on a fifth of the real time scale
// (a client timeout of 1s instead of glibc's 5s, a Timeout of 400ms
// instead of 2s): an upstream answering the first try after 1, 2.1, 3 and
// 4.5 "seconds" is answered, the late reply coming after the second try
// went out; one answering after the client gave up is SERVFAIL within the
// window.
func TestAttemptSchedule(t *testing.T) {
	const scale = 5
	tests := []struct {
		delay      time.Duration // on the real scale
		wantAnswer bool
		minTries   int64 // the second try goes out at Timeout; at most 2
	}{
		{delay: 1 * time.Second, wantAnswer: true, minTries: 1},
		{delay: 2100 * time.Millisecond, wantAnswer: true, minTries: 2},
		{delay: 3 * time.Second, wantAnswer: true, minTries: 2},
		{delay: 4500 * time.Millisecond, wantAnswer: true, minTries: 2},
		{delay: 5500 * time.Millisecond, wantAnswer: false, minTries: 2},
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("upstream after %v", tc.delay), func(t *testing.T) {
			t.Parallel()
			srv := delayedServer(t, tc.delay/scale)
			r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}, Timeout: 2 * time.Second / scale,
				ClientTimeout: 5 * time.Second / scale, CacheSize: -1})
			window := 5 * time.Second / scale * 24 / 25
			expect := window
			if tc.wantAnswer {
				expect = tc.delay / scale
			}
			// A timer started beside the query shows how late this
			// (possibly loaded) machine runs: that lateness is allowed
			// on top of the 300ms, so load cannot fail the test, but a
			// schedule that waits for the wrong deadline still does.
			late := make(chan time.Duration, 1)
			start := time.Now()
			go func() { time.Sleep(expect); late <- time.Since(start) - expect }()
			_, _, err := r.AppendReply(context.Background(), nil, qwire(t, "slow.example.", dns.TypeA))
			took := time.Since(start)
			slack := 300*time.Millisecond + <-late
			if tc.wantAnswer {
				if err != nil {
					t.Fatalf("after %v: %v, want the late answer", took, err)
				}
				if took > expect+slack {
					t.Errorf("answered after %v, want soon after the upstream's %v", took, tc.delay/scale)
				}
			} else {
				if !errors.Is(err, ErrUpstreamFailed) {
					t.Fatalf("err %v, want ErrUpstreamFailed", err)
				}
				if took < window || took > window+slack {
					t.Errorf("failed after %v, want at the %v window, before the client's %v", took, window, 5*time.Second/scale)
				}
			}
			if got := srv.Queries.Load(); got < tc.minTries || got > 2 {
				t.Errorf("upstream got %d tries, want %d to 2", got, tc.minTries)
			}
		})
	}
}

// BenchmarkSlowUpstream is the slow-upstream table of README.md, with the
// real defaults (glibc's 5s client timeout, Timeout 2s): for an upstream
// answering the first try after each delay, the time until the Resolver
// answers, and whether it answered (1) or failed (0).
//
//	go test -run x -bench SlowUpstream -benchtime 1x ./pkg/proxy/upstream/
func BenchmarkSlowUpstream(b *testing.B) {
	for _, delay := range []time.Duration{time.Second, 2100 * time.Millisecond, 3 * time.Second, 4500 * time.Millisecond} {
		b.Run(fmt.Sprintf("delay=%v", delay), func(b *testing.B) {
			answered, total := 0, time.Duration(0)
			for b.Loop() {
				srv := delayedServer(b, delay)
				r, err := New(Config{Upstreams: []string{srv.Addr}, CacheSize: -1, Registry: proxymetrics.Registry(metrics.NewRegistry())})
				if err != nil {
					b.Fatal(err)
				}
				start := time.Now()
				_, _, err = r.AppendReply(context.Background(), nil, qwire(b, "slow.example.", dns.TypeA))
				total += time.Since(start)
				if err == nil {
					answered++
				}
				r.Close()
			}
			b.ReportMetric(float64(answered)/float64(b.N), "answered")
			b.ReportMetric(total.Seconds()/float64(b.N), "s/lookup")
		})
	}
}
