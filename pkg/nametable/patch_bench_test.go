package nametable

import (
	"fmt"
	"net/netip"
	"runtime"
	"runtime/debug"
	"testing"
)

// BenchmarkPatch replaces 1% of a table of simple names (1,000 of 100,000
// entries get a new address: each is removed with its old content and
// added with the new) and reports, besides the CPU and the bytes each
// patch allocates, the largest live heap a collection saw while it ran
// over the heap before it, as a share of the table (peak/table: what the
// replacement costs on top of the table that serves, where a rebuild costs
// a whole table) and the table's Garbage afterwards. "first" patches a
// table fresh from the Builder (the first patch counts what lies below
// each name once; the table is built untimed); "next" patches the table the last patch made, as an
// agent applying deltas does, rebuilding (untimed) once Garbage passes a
// quarter. GOGC=5 meanwhile, so the peak is sampled every few hundred
// kilobytes; "next/gogc=100" is "next" without the sampling, for its CPU.
func BenchmarkPatch(b *testing.B) {
	const n, changed = 100_000, 1_000
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	runtime.GC()
	before := liveHeap()
	base := buildSimple(b, n)
	runtime.GC()
	size := float64(liveHeap() - before)
	// The entries a patch changes, with their two contents.
	olds := make([]Entry, changed)
	news := make([]Entry, changed)
	for i := range changed {
		simpleEntry(&olds[i], i*(n/changed))
		news[i] = olds[i]
		a := olds[i].IPs[0].As4()
		news[i].IPs = []netip.Addr{netip.AddrFrom4([4]byte{11, a[1], a[2], a[3]})}
	}
	track := true
	measure := func(b *testing.B, t *Table, remove, add []Entry) (*Table, float64) {
		if !track {
			nt, err := t.Patch(remove, add)
			if err != nil {
				b.Fatal(err)
			}
			return nt, 0
		}
		b.StopTimer()
		runtime.GC()
		b.StartTimer()
		start := liveHeap()
		p := startPeak()
		nt, err := t.Patch(remove, add)
		top := p.end()
		if err != nil {
			b.Fatal(err)
		}
		return nt, float64(top) - float64(start)
	}
	report := func(b *testing.B, peak float64, t *Table) {
		if track {
			b.ReportMetric(peak/size, "peak/table")
		}
		b.ReportMetric(size/n, "table-B/name")
		b.ReportMetric(t.Garbage(), "garbage")
	}
	b.Run(fmt.Sprintf("names=%d/first", n), func(b *testing.B) {
		b.ReportAllocs()
		var peak float64
		var nt *Table
		for b.Loop() {
			b.StopTimer()
			nt = nil
			t := buildSimple(b, n)
			b.StartTimer()
			var p float64
			nt, p = measure(b, t, olds, news)
			peak = max(peak, p)
		}
		report(b, peak, nt)
	})
	next := func(b *testing.B) {
		b.ReportAllocs()
		cur, err := base.Patch(nil, nil)
		if err != nil {
			b.Fatal(err)
		}
		live := olds
		var peak float64
		for b.Loop() {
			if cur.Garbage() > 0.25 {
				b.StopTimer()
				cur = nil
				runtime.GC()
				var es []Entry
				for i := range n {
					var e Entry
					simpleEntry(&e, i)
					es = append(es, e)
				}
				for i := range changed {
					es[i*(n/changed)] = live[i]
				}
				if cur, err = New(es, bigZones, bigPod); err != nil {
					b.Fatal(err)
				}
				if cur, err = cur.Patch(nil, nil); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			next := news
			if &live[0] == &news[0] {
				next = olds
			}
			var p float64
			cur, p = measure(b, cur, live, next)
			live = next
			peak = max(peak, p)
		}
		report(b, peak, cur)
	}
	b.Run(fmt.Sprintf("names=%d/next", n), next)
	// The same without the peak's sampling and at the default GOGC, for
	// the CPU a patch costs.
	track = false
	debug.SetGCPercent(100)
	b.Run(fmt.Sprintf("names=%d/next/gogc=100", n), next)
}
