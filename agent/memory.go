package agent

import (
	"context"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"
)

// memoryReleaser hands memory the agent no longer uses back to the OS. The
// Go runtime keeps freed heap pages for reuse and lets garbage pile up to
// GOGC percent above the live heap before collecting it; for a process
// whose answer path allocates nothing that garbage can sit there for hours:
// after a table build (the decoded table, converted entries, drafts) or
// after a burst of first-seen questions (each packed once), RSS stayed near
// twice the live heap. So it releases
//   - after each table swap, at most once per minGap, so a burst of
//     versions costs one forced GC per minGap, not one per version;
//   - when a periodic look (every check, a read of runtime/metrics, no GC)
//     finds more reclaimable memory (garbage plus free heap pages) than
//     slack: 1 MiB or a sixteenth of the live heap.
type memoryReleaser struct {
	minGap, check time.Duration
	kicks         chan struct{} // capacity 1: pending requests collapse
	// release frees memory (debug.FreeOSMemory); reclaimable reads how much
	// it would free and the live heap, in bytes. Replaced in tests.
	release     func()
	reclaimable func() (reclaim, live uint64)
}

func newMemoryReleaser(minGap, check time.Duration) *memoryReleaser {
	return &memoryReleaser{
		minGap: minGap, check: check, kicks: make(chan struct{}, 1),
		release: debug.FreeOSMemory, reclaimable: readReclaimable,
	}
}

// kick asks for a release; it never blocks.
func (r *memoryReleaser) kick() {
	select {
	case r.kicks <- struct{}{}:
	default:
	}
}

// worthIt reports whether releasing reclaim bytes beside a live heap of
// live bytes is worth a forced GC.
func worthIt(reclaim, live uint64) bool {
	return reclaim > max(1<<20, live/16)
}

// Run releases memory after kicks and when the periodic look finds enough
// to give back, until ctx ends.
func (r *memoryReleaser) Run(ctx context.Context) error {
	tick := time.NewTicker(r.check)
	defer tick.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.kicks:
			if wait := r.minGap - time.Since(last); wait > 0 && !last.IsZero() {
				t := time.NewTimer(wait)
				select {
				case <-ctx.Done():
					t.Stop()
					return nil
				case <-t.C:
				}
			}
		case <-tick.C:
			if !worthIt(r.reclaimable()) {
				continue
			}
		}
		r.release()
		last = time.Now()
	}
}

// readReclaimable reads from runtime/metrics what a forced GC plus a
// scavenge would give back: the heap objects that are not live (garbage
// as of now; the live figure is from the last GC) and the free heap pages
// the runtime still holds.
func readReclaimable() (reclaim, live uint64) {
	s := []rtmetrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/gc/heap/live:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	rtmetrics.Read(s)
	for _, v := range s {
		if v.Value.Kind() != rtmetrics.KindUint64 {
			return 0, 0 // an unknown metric: never release on its account
		}
	}
	objects, live, free := s[0].Value.Uint64(), s[1].Value.Uint64(), s[2].Value.Uint64()
	if objects > live {
		reclaim = objects - live
	}
	return reclaim + free, live
}
