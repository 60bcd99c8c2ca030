package difftest

import (
	"context"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/meshdns/meshdns/e2e/internal/kubestack"
	"github.com/miekg/dns"
)

// envInt reads a size or seed from the environment (make difftest sets
// them), or def.
func envInt(t testing.TB, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatalf("%s=%q: %v", name, v, err)
	}
	return n
}

// TestDifferential asks meshdns's agent and CoreDNS the same questions
// about the same generated cluster and fails on any difference outside
// the documented classes. DIFFTEST_SERVICES (default 300) sizes the
// cluster, DIFFTEST_SEED (default 1) draws it.
func TestDifferential(t *testing.T) {
	size := envInt(t, "DIFFTEST_SERVICES", 300)
	seed := envInt(t, "DIFFTEST_SEED", 1)
	coreDNSBinary(t) // skip (outside CI) before starting anything
	c := cluster.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	rng := rand.New(rand.NewPCG(uint64(seed), 0x6469666674657374))
	w := generate(ctx, t, c, rng, size)
	podNS := w.namespaces[0]
	upstream := startUpstream(t)
	cd := startCoreDNS(t, c, upstream)
	md := kubestack.Start(t, c, podNS, upstream, tableTTL).DNS

	// Both servers have the whole cluster once they answer the endpoint
	// name written last. No deadline but the test's: a loaded machine may
	// take long to sync.
	for _, srv := range []struct{ name, addr string }{{"coredns", cd}, {"meshdns", md}} {
		start := time.Now()
		for {
			m, err := exchange(srv.addr, w.sentinel, dns.TypeA, tcp)
			if err == nil && m.Rcode == dns.RcodeSuccess && len(m.Answer) > 0 {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("%s never answered %s: %v", srv.name, w.sentinel, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("%s answers for the last object written after %v", srv.name, time.Since(start).Round(time.Millisecond))
	}

	qs := corpus(rng, w, podNS)
	diffs := make([]*difference, len(qs))
	errs := make([]error, len(qs))
	truncated := make([]bool, len(qs)) // both replies had TC
	var wg sync.WaitGroup
	work := make(chan int)
	for range 8 {
		wg.Go(func() {
			for i := range work {
				q := qs[i]
				a, err := resolve(cd, q, podNS)
				if err != nil {
					errs[i] = err
					continue
				}
				b, err := resolve(md, q, podNS)
				if err != nil {
					errs[i] = err
					continue
				}
				truncated[i] = a.tc && b.tc
				if what := diff(a, b); len(what) > 0 {
					diffs[i] = &difference{q: q, cd: a, md: b, what: what}
				}
			}
		})
	}
	for i := range qs {
		work <- i
	}
	close(work)
	wg.Wait()

	counts := map[string]int{}
	var unexplained []string
	for i, d := range diffs {
		if errs[i] != nil {
			t.Errorf("%v: %v", qs[i], errs[i])
			continue
		}
		if truncated[i] {
			counts["(both truncated)"]++
		}
		if d == nil {
			counts["same"]++
			continue
		}
		if name := classify(*d); name != "" {
			counts[name]++
			continue
		}
		unexplained = append(unexplained, d.String())
	}
	for _, name := range slices.Sorted(maps.Keys(counts)) {
		t.Logf("%-28s %d", name, counts[name])
	}
	t.Logf("%d services, %d questions, seed %d", len(w.services), len(qs), seed)
	for i, u := range unexplained {
		if i == 40 {
			t.Errorf("... and %d more", len(unexplained)-i)
			break
		}
		t.Errorf("undocumented difference: %s", u)
	}
}
