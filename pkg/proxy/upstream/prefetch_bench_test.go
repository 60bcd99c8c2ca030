package upstream

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// BenchmarkPrefetchTTLBoundary measures what a hot name's askers wait for
// across its TTL boundaries, without and with prefetch: a real upstream on
// loopback that answers after 30ms with TTL 2s, one question every 10ms
// (each in its own goroutine, as independent clients ask) for 10s, so
// five expiries. Without prefetch every expiry makes the questions of the
// next 30ms wait for the upstream; with it (2 hits in a row, refreshed in
// the last 50% of the TTL) the cache answers them. It reports the p50,
// p99 and largest wait, and the upstream queries. Run with
// go test -run x -bench PrefetchTTLBoundary -benchtime 1x ./pkg/proxy/upstream/
func BenchmarkPrefetchTTLBoundary(b *testing.B) {
	const (
		delay  = 30 * time.Millisecond
		every  = 10 * time.Millisecond
		length = 10 * time.Second
	)
	for _, bc := range []struct {
		name     string
		prefetch int
	}{{"off", 0}, {"on", 2}} {
		b.Run(bc.name, func(b *testing.B) {
			srv := newServer(b, func(w dns.ResponseWriter, req *dns.Msg) {
				time.Sleep(delay)
				answerWith(b, dns.RcodeSuccess, []string{"$QNAME 2 IN A 192.0.2.1"}, nil)(w, req)
			})
			r, _ := newTestResolver(b, Config{Upstreams: []string{srv.Addr}, Timeout: time.Second,
				Prefetch: bc.prefetch, PrefetchPercent: 50})
			q := qwire(b, "hot.example.", dns.TypeA)
			var (
				mu    sync.Mutex
				waits []time.Duration
				wg    sync.WaitGroup
			)
			tick := time.NewTicker(every)
			defer tick.Stop()
			end := time.Now().Add(length)
			for now := range tick.C {
				if now.After(end) {
					break
				}
				wg.Go(func() {
					start := time.Now()
					_, _, err := r.AppendReply(context.Background(), nil, q)
					d := time.Since(start)
					if err != nil {
						b.Error(err)
					}
					mu.Lock()
					waits = append(waits, d)
					mu.Unlock()
				})
			}
			wg.Wait()
			slices.Sort(waits)
			pct := func(p float64) float64 { return float64(waits[int(p*float64(len(waits)-1))].Microseconds()) }
			b.ReportMetric(pct(0.50), "p50-µs")
			b.ReportMetric(pct(0.99), "p99-µs")
			b.ReportMetric(float64(waits[len(waits)-1].Microseconds()), "max-µs")
			b.ReportMetric(float64(srv.Queries.Load()), "upstream-queries")
			b.ReportMetric(float64(len(waits)), "questions")
		})
	}
}
