package proxy

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"runtime"
	"sync"
	"testing"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
)

// serviceQuery is the A question for service i of serviceTable, and the
// address it answers.
func serviceQuery(t testing.TB, i int) (pkt []byte, name string, addr netip.Addr) {
	t.Helper()
	name = fmt.Sprintf("svc%d.ns%d.svc.cluster.local.", i, i%100)
	pkt, err := newQuery(name, dns.TypeA).Pack()
	if err != nil {
		t.Fatal(err)
	}
	return pkt, name, netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)})
}

// checkServiceReply reports whether r answers name with exactly addr, as
// an error when it does not; safe to call from any goroutine.
func checkServiceReply(r []byte, name string, addr netip.Addr) error {
	var m dns.Msg
	if err := m.Unpack(r); err != nil {
		return fmt.Errorf("%s: unpack reply: %w", name, err)
	}
	if len(m.Answer) != 1 {
		return fmt.Errorf("%s: answer %v, want A %s", name, m.Answer, addr)
	}
	if a, ok := m.Answer[0].(*dns.A); !ok || a.Hdr.Name != name || a.A.String() != addr.String() {
		return fmt.Errorf("%s: answer %v, want A %s", name, m.Answer[0], addr)
	}
	return nil
}

// Once the cache has started over a few times, a first answer leaves no
// garbage but its name: a new generation reuses the memory of the last.
func TestAnswerCacheGenerationsReuseMemory(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector's sync.Pool drops items: allocations are not the program's")
	}
	const n = 4000
	h, err := NewHandler(func() Config {
		cfg := testConfig(newCachedResolver(t))
		cfg.MaxAnswers = 16 * answerShards
		return cfg
	}())
	if err != nil {
		t.Fatal(err)
	}
	h.SetTable(serviceTable(t, n))
	pkts := make([][]byte, n)
	for i := range pkts {
		pkts[i], _, _ = serviceQuery(t, i)
	}
	dst := make([]byte, 0, maxUDPPacket)
	for _, p := range pkts[:n/2] { // several generations per shard
		for range 2 { // asked again: kept
			h.Serve(t.Context(), dst, p, UDP)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for _, p := range pkts[n/2:] {
		for range 2 {
			if r := h.Serve(t.Context(), dst, p, UDP); len(r) < dnswire.HeaderLen || r[7] != 1 {
				t.Fatalf("reply %x", r)
			}
		}
	}
	runtime.ReadMemStats(&after)
	// Storing each answer in new memory cost about 250 bytes.
	if per := (after.TotalAlloc - before.TotalAlloc) / (n / 2); per > 64 {
		t.Errorf("a first answer allocates %d bytes, want at most 64", per)
	}
	if got := h.state.Load().len(); got > 16*answerShards || got == 0 {
		t.Errorf("cache holds %d answers, bound %d", got, 16*answerShards)
	}
}

// Readers copying cached replies while writers start new generations in
// the same memory always see whole, right answers (run with -race).
func TestAnswerCacheGenerationsUnderConcurrency(t *testing.T) {
	const n, readers, queries = 600, 4, 1500
	h, err := NewHandler(func() Config {
		cfg := testConfig(newCachedResolver(t))
		cfg.MaxAnswers = 2 * answerShards // a new generation every few answers
		return cfg
	}())
	if err != nil {
		t.Fatal(err)
	}
	h.SetTable(serviceTable(t, n))
	pkts, names, addrs := make([][]byte, n), make([]string, n), make([]netip.Addr, n)
	for i := range n {
		pkts[i], names[i], addrs[i] = serviceQuery(t, i)
	}
	var wg sync.WaitGroup
	for g := range readers {
		wg.Go(func() {
			dst := make([]byte, 0, maxUDPPacket)
			for q := range queries {
				// Every reader asks a few hot names and walks the rest.
				i := (q*7 + g*131) % n
				if q%2 == 0 {
					i = q % 5
				}
				if err := checkServiceReply(h.Serve(t.Context(), dst, pkts[i], UDP), names[i], addrs[i]); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// An answer is kept when its question is asked again, not the first
// time: a pod asking every name once keeps nothing, and a name it asks
// again costs no Lookup from the third time on.
func TestAnswerKeptWhenAskedAgain(t *testing.T) {
	h, err := NewHandler(testConfig(newCachedResolver(t)))
	if err != nil {
		t.Fatal(err)
	}
	tbl := demoTable(t)
	h.SetTable(tbl)
	pkt := packMsg(t, newQuery("web.demo.svc.cluster.local.", dns.TypeA))
	for i, want := range []struct{ entries, lookups int64 }{{0, 1}, {1, 2}, {1, 2}, {1, 2}} {
		if r := h.Serve(t.Context(), nil, pkt, UDP); len(r) < dnswire.HeaderLen || binary.BigEndian.Uint16(r[6:]) != 3 {
			t.Fatalf("query %d: reply %x", i+1, r)
		}
		if got := int64(h.state.Load().len()); got != want.entries {
			t.Errorf("after query %d: %d answers kept, want %d", i+1, got, want.entries)
		}
		if got := tbl.lookups.Load(); got != want.lookups {
			t.Errorf("after query %d: %d lookups, want %d", i+1, got, want.lookups)
		}
	}
}

// The admission filter starts over once an eighth of its bits are set, so
// questions asked once are kept only by the odd shared bit, and a
// question asked twice is kept the second time.
func TestAdmitStartsOver(t *testing.T) {
	st := newTableState(nil, defaultMaxAnswers, defaultMaxAnswerBytes)
	admitted := 0
	for i := range 4 * seenBits {
		if st.admit([]byte(fmt.Sprintf("q%d", i))) {
			admitted++
		}
	}
	// Bits are shared by chance: one time in 16 at the fullest, 6% on
	// average.
	if admitted > 4*seenBits/10 {
		t.Errorf("%d of %d questions asked once admitted, want under 10%%", admitted, 4*seenBits)
	}
	if n := st.seenN.Load(); n >= seenBits/seenClear {
		t.Errorf("%d bits set, the filter never started over", n)
	}
	st = newTableState(nil, defaultMaxAnswers, defaultMaxAnswerBytes)
	if st.admit([]byte("again")) || !st.admit([]byte("again")) {
		t.Error("a question asked twice was not admitted the second time only")
	}
}
