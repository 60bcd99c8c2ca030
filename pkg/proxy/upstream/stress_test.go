package upstream

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestConcurrentMixedLoad runs many goroutines over a set of names, mixing
// spellings, hits, misses, coalesced flights and evictions, and checks every
// reply answers its own question: no cross-talk between flights, cache slots
// or reused buffers. Bounded: 8 x 300 queries.
func TestConcurrentMixedLoad(t *testing.T) {
	const names = 64
	// The upstream answers n<i>.example. with 10.0.0.<i>, so a reply can be
	// checked against its question.
	srv := newServer(t, func(w dns.ResponseWriter, req *dns.Msg) {
		q := req.Question[0]
		var i int
		if _, err := fmt.Sscanf(strings.ToLower(q.Name), "n%d.example.", &i); err != nil {
			t.Errorf("server: odd name %q", q.Name)
		}
		answerWith(t, 0, []string{fmt.Sprintf("$QNAME 2 IN A 10.0.0.%d", i)}, nil)(w, req)
	})
	clk := newClock()
	r, _ := newTestResolver(t, Config{Upstreams: []string{srv.Addr}, CacheSize: names / 2, Now: clk.Now, Timeout: 2 * time.Second})

	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			buf := make([]byte, 0, 512)
			for k := range 300 {
				if g == 0 && k%50 == 0 {
					clk.Advance(time.Second) // entries expire while others read them
				}
				i := (k*7 + g*13) % names
				name := fmt.Sprintf("n%d.example.", i)
				if k%3 == 0 {
					name = strings.ToUpper(name)
				}
				q := qwire(t, name, dns.TypeA)
				b, _, err := r.AppendReply(context.Background(), buf[:0], q)
				if err != nil {
					t.Errorf("%s: %v", name, err)
					return
				}
				m := new(dns.Msg)
				if err := m.Unpack(b); err != nil {
					t.Errorf("%s: unpack: %v", name, err)
					return
				}
				if string(b[12:12+len(q)]) != string(q) || len(m.Answer) != 1 {
					t.Errorf("%s: wrong reply %v", name, m)
					return
				}
				a, ok := m.Answer[0].(*dns.A)
				want := netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})
				if !ok || a.Hdr.Name != name || netip.MustParseAddr(a.A.String()) != want {
					t.Errorf("%s: answer %v, want %v", name, m.Answer[0], want)
					return
				}
			}
		})
	}
	wg.Wait()
	if got := counter(t, r.metrics.entries); got > names/2 {
		t.Errorf("cache holds %v entries, bound %d", got, names/2)
	}
	t.Logf("upstream queries %d, hits %v, coalesced %v, evictions %v", srv.Queries.Load(),
		counter(t, &r.metrics.hits), counter(t, &r.metrics.coalesced), counter(t, &r.metrics.evictions))
}
