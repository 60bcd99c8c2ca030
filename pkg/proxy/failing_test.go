package proxy

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// TestHandlerRecordsFailing: the handler counts failing answers from the
// table and the Resolver when a summary is set, without allocating, and
// nothing when none is.
func TestHandlerRecordsFailing(t *testing.T) {
	h, err := NewHandler(testConfig(newCachedResolver(t)))
	if err != nil {
		t.Fatal(err)
	}
	h.SetTable(demoTable(t))
	ask := func(name string) {
		pkt, err := newQuery(name, dns.TypeA).Pack()
		if err != nil {
			t.Fatal(err)
		}
		h.Serve(context.Background(), make([]byte, 0, maxUDPPacket), pkt, UDP)
	}
	ask("nope.demo.svc.cluster.local.") // no summary: not counted anywhere
	f := NewFailingNames(5)
	h.SetFailingNames(f)
	ask("Nope.demo.svc.cluster.local.")
	ask("nope.demo.svc.cluster.local.")
	ask("web.demo.svc.cluster.local.") // NOERROR
	ask("www.example.org.")            // NOERROR from the cache
	want := []FailingName{{Name: "nope.demo.svc.cluster.local.", Rcode: dns.RcodeNameError, Count: 2}}
	got, _ := f.Take()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Take (-want +got):\n%s", diff)
	}
	if !raceEnabled {
		assertNoAllocs(t, h)
	}
	f.Take()
	h.SetFailingNames(nil)
	ask("nope.demo.svc.cluster.local.")
	if got, _ := f.Take(); len(got) != 0 {
		t.Errorf("counted %v after the summary was removed", got)
	}
}

// assertNoAllocs: a failing, a table and a cache answer allocate nothing
// with the summary on.
func assertNoAllocs(t *testing.T, h *Handler) {
	t.Helper()
	for _, q := range []string{"nope.demo.svc.cluster.local.", "web.demo.svc.cluster.local.", "www.example.org."} {
		pkt, _ := newQuery(q, dns.TypeA).Pack()
		dst := make([]byte, 0, maxUDPPacket)
		h.Serve(context.Background(), dst, pkt, UDP)
		if a := testing.AllocsPerRun(200, func() { h.Serve(context.Background(), dst, pkt, UDP) }); a != 0 {
			t.Errorf("%s: %v allocs per answer with the summary on, want 0", q, a)
		}
	}
}

// BenchmarkHandlerFailing is BenchmarkHandler's questions with the
// failing-names summary off and on: compare the two with benchstat.
func BenchmarkHandlerFailing(b *testing.B) {
	for _, on := range []bool{false, true} {
		h, err := NewHandler(testConfig(newCachedResolver(b)))
		if err != nil {
			b.Fatal(err)
		}
		setBenchTiming(h)
		h.SetTable(demoTable(b))
		if on {
			h.SetFailingNames(NewFailingNames(DefaultFailingTopN))
		}
		for _, bq := range benchQuestions {
			b.Run(fmt.Sprintf("summary=%v/%s", on, bq.name), func(b *testing.B) {
				pkt, err := newQuery(bq.qname, bq.qtype).Pack()
				if err != nil {
					b.Fatal(err)
				}
				dst := make([]byte, 0, maxUDPPacket)
				b.ReportAllocs()
				for b.Loop() {
					h.Serve(context.Background(), dst, pkt, UDP)
				}
			})
		}
	}
}
