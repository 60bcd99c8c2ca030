package agent

import (
	"context"
	"runtime/debug"
	"time"
)

// memoryReleaser hands the garbage of a table build back to the OS. A build
// allocates several times the finished table (the decoded NameTable,
// converted entries, draft maps); with the default GOGC the heap then sits
// near twice the peak until the next GC cycles, so a 10,000-service pod
// would carry about 45 MB RSS for a 15 MB live heap. Releasing once after a
// swap keeps RSS near the live heap. It runs at most once per interval, so
// a burst of versions costs one forced GC, not one per version.
type memoryReleaser struct {
	interval time.Duration
	kicks    chan struct{} // capacity 1: pending requests collapse
}

func newMemoryReleaser(interval time.Duration) *memoryReleaser {
	return &memoryReleaser{interval: interval, kicks: make(chan struct{}, 1)}
}

// kick asks for a release; it never blocks.
func (r *memoryReleaser) kick() {
	select {
	case r.kicks <- struct{}{}:
	default:
	}
}

// Run releases memory after kicks until ctx ends.
func (r *memoryReleaser) Run(ctx context.Context) error {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-r.kicks:
		}
		if wait := r.interval - time.Since(last); wait > 0 && !last.IsZero() {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
		}
		debug.FreeOSMemory()
		last = time.Now()
	}
}
