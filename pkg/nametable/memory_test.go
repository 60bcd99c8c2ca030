package nametable

import (
	"fmt"
	"net/netip"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
)

// simpleEntry is name i of the memory benchmark: a Kubernetes service
// svc-i.ns-(i%100).svc.cluster.local with one address, the shape of most
// names an agent holds. It is built into e, reusing its IP slice, the way
// the agent converts one wire entry at a time.
func simpleEntry(e *Entry, i int) {
	ns := fmt.Sprintf("ns-%d", i%benchNamespaces)
	svc := fmt.Sprintf("svc-%d", i)
	*e = Entry{
		Hostname: svc + "." + ns + ".svc.cluster.local", Registry: "Kubernetes",
		ShortName: svc, Namespace: ns,
		IPs: append(e.IPs[:0], netip.AddrFrom4([4]byte{10, byte(96 + i>>16), byte(i >> 8), byte(i)})),
	}
}

// buildSimple builds the table of n simple names through a Builder, one
// entry at a time, with the hint the agent gives (none).
func buildSimple(tb testing.TB, n int) *Table {
	b, err := NewBuilder(bigZones, bigPod, 0)
	if err != nil {
		tb.Fatal(err)
	}
	var e Entry
	for i := range n {
		simpleEntry(&e, i)
		if err := b.Add(&e); err != nil {
			tb.Fatal(err)
		}
	}
	return b.Table()
}

// liveHeap is the heap the last garbage collection found live.
func liveHeap() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// peakTracker records the largest live heap any garbage collection found
// while it runs: a finalizer re-armed on every cycle reads the figure the
// cycle left. Run with a low GOGC so that collections come often enough
// for the largest to be close to the true peak.
type peakTracker struct {
	max  atomic.Uint64
	stop atomic.Bool
	done sync.WaitGroup
}

func startPeak() *peakTracker {
	p := &peakTracker{}
	p.done.Add(1)
	p.arm()
	return p
}

func (p *peakTracker) arm() {
	sentinel := new([16]byte)
	runtime.SetFinalizer(sentinel, func(*[16]byte) {
		if v := liveHeap(); v > p.max.Load() {
			p.max.Store(v)
		}
		if p.stop.Load() {
			p.done.Done()
			return
		}
		p.arm()
	})
}

// end stops the tracker after one more collection and returns the peak.
func (p *peakTracker) end() uint64 {
	p.stop.Store(true)
	runtime.GC()
	p.done.Wait()
	return p.max.Load()
}

// BenchmarkTableMemory reports what a finished table of simple names costs
// (B/name: heap kept after a collection, divided by the names) and how far
// the heap in use rises above that while the Builder builds it
// (peak/table: the largest live heap any collection saw during NewBuilder,
// Add and Table, over the finished table; 1 would be no overhead). The
// garbage collector runs at GOGC=5 meanwhile, so the peak is sampled every
// few hundred kilobytes of allocation.
func BenchmarkTableMemory(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("names=%d", n), func(b *testing.B) {
			defer debug.SetGCPercent(debug.SetGCPercent(5))
			var size, peak float64
			for b.Loop() {
				runtime.GC()
				base := liveHeap()
				p := startPeak()
				t := buildSimple(b, n)
				top := p.end()
				runtime.GC()
				kept := liveHeap()
				runtime.KeepAlive(t)
				size = float64(kept - base)
				peak = float64(top - base)
			}
			b.ReportMetric(size/float64(n), "B/name")
			b.ReportMetric(peak/size, "peak/table")
		})
	}
}
