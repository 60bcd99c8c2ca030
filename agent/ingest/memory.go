package ingest

// Every turn of the Go runtime's memory knobs in the agent is in this
// file: the collector (runtime.GC, debug.FreeOSMemory), GOGC
// (debug.SetGCPercent) and the memory limit (debug.SetMemoryLimit). Why:
// the pod's memory limit must cover the agent's peak RSS, and with the
// runtime's defaults a table change peaked at about twice what it holds
// live, because the garbage of a build (decoded names, converted entries)
// and the pages it freed were left for the collector's own pace and the
// scavenger's. So a table change runs with a lower GOGC and a memory limit
// of what is live plus what the change needs, and memory no longer used
// is handed back to the OS after it (Releaser).

import (
	"context"
	"runtime"
	"runtime/debug"
	rtmetrics "runtime/metrics"
	"time"
)

// Releaser hands memory the agent no longer uses back to the OS. The
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
type Releaser struct {
	minGap, check time.Duration
	kicks         chan struct{} // capacity 1: pending requests collapse
	// release frees memory (debug.FreeOSMemory); reclaimable reads how much
	// it would free and the live heap, in bytes. Replaced in tests.
	release     func()
	reclaimable func() (reclaim, live uint64)
}

// NewReleaser returns a Releaser that releases at most once per minGap
// after a Kick, and looks every check.
func NewReleaser(minGap, check time.Duration) *Releaser {
	return &Releaser{
		minGap: minGap, check: check, kicks: make(chan struct{}, 1),
		release: debug.FreeOSMemory, reclaimable: readReclaimable,
	}
}

// Kick asks for a release; it never blocks.
func (r *Releaser) Kick() {
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
func (r *Releaser) Run(ctx context.Context) error {
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
	v, ok := readMetrics("/memory/classes/heap/objects:bytes", "/gc/heap/live:bytes", "/memory/classes/heap/free:bytes")
	if !ok {
		return 0, 0 // an unknown metric: never release on its account
	}
	objects, live, free := v[0], v[1], v[2]
	if objects > live {
		reclaim = objects - live
	}
	return reclaim + free, live
}

// buildGCPercent is the GOGC of a table build. A build's garbage (decoder
// tokens, converted entries, drafts) is several times the table, and with
// the default GOGC of 100 the heap grew to twice what the build held live
// before the collector caught up: the peak RSS of a pod, the figure its
// memory limit must cover. At 25 the heap stays within a quarter of what
// is live, for a few more collections during the build.
const buildGCPercent = 25

// buildPeak is how far the live heap of a build rises over the table it
// builds (pkg/nametable BenchmarkTableMemory, peak/table: 1.16 at 100,000
// names), with some room for the converter's garbage: the memory limit
// during a replacement leaves room for that much beside what is live (the
// old table), and no more. Measured at 100,000 names, the peak of a
// replacement over the steady heap was 22.5 MB with room for 2.6 times
// the live heap, 19 MB with 1.2 at the same build time, 17 MB with 0.3
// but a build half again as long (the collector runs all the time).
const buildPeak = 1.3

// buildMemory readies the runtime for a table build and returns the
// function that undoes it, so the build's garbage is collected before the
// heap grows instead of after:
//   - a collection first, when a table is being replaced: what the
//     previous build left (the old answer cache, the wire form just
//     written to the state dir, the stream's read buffers) is freed and
//     its memory reused by the build rather than left beside it;
//   - GOGC lowered to buildGCPercent (unless it is lower or off);
//   - when replacing, a memory limit of what the runtime holds besides
//     free heap pages, plus buildPeak times the live heap (about the old
//     table): past it the collector runs as often as needed and the
//     scavenger hands freed pages back at once, so GOGC's headroom and
//     pages not yet returned cannot add to the two tables and the
//     build's scratch. A lower GOMEMLIMIT (or debug.SetMemoryLimit) wins
//     and is restored afterwards.
//
// lowered reports whether it lowered GOGC (a build may then pace it,
// startPace).
func buildMemory(replacing bool) (restore func(), lowered bool) {
	if replacing {
		runtime.GC()
	}
	oldGC := debug.SetGCPercent(buildGCPercent)
	if oldGC >= 0 && oldGC <= buildGCPercent || oldGC < 0 {
		debug.SetGCPercent(oldGC)
	}
	lowered = oldGC > buildGCPercent
	restoreGC := func() {
		if lowered {
			debug.SetGCPercent(oldGC)
		}
	}
	if !replacing {
		return restoreGC, lowered
	}
	userLimit := debug.SetMemoryLimit(-1)
	held, live := readHeld()
	limit := int64(held) + int64(float64(live)*buildPeak) + 4<<20
	if held == 0 || limit >= userLimit {
		return restoreGC, lowered
	}
	debug.SetMemoryLimit(limit)
	return func() {
		debug.SetMemoryLimit(userLimit)
		restoreGC()
	}, lowered
}

// startPeak is the heap a start's build may reach, over the live heap of
// the finished build: that of buildGCPercent at the end of a build.
const startPeak = 1 + buildGCPercent/100.0

// startGCPercent is the highest GOGC startPace sets.
const startGCPercent = 100

// startPace paces GOGC over the build of a first table (none is served
// beside it) expected to hold names names, and returns the function the
// build calls with the names it added so far. Run at buildGCPercent
// throughout, a start from 100,000 cluster-shaped services marked about
// ten times the finished table's heap, from nothing up by a quarter at a
// time: a third of the start's CPU time. A start's peak is the heap at the
// end of its build, so early on the heap may grow further between
// collections: at a share p of the names added, whose live heap is about p
// times the finished build's, GOGC is 100*(startPeak/p - 1) (between
// buildGCPercent and startGCPercent), which keeps the heap goal within
// startPeak times the finished build's heap, the bound buildGCPercent
// keeps at the end. Use it only where buildMemory lowered GOGC (whose
// restore sets it back), and not for a replacement, whose old table is
// live beside the build (its limit bounds it instead).
func startPace(names int) func(added int) {
	last := -1
	return func(added int) {
		g := startGCPercent
		if added > 0 {
			g = int(100 * (startPeak*float64(names)/float64(added) - 1))
		}
		g = min(max(g, buildGCPercent), startGCPercent)
		if g != last {
			debug.SetGCPercent(g)
			last = g
		}
	}
}

// readHeld reads from runtime/metrics the memory the Go runtime holds from
// the OS (what a memory limit counts) less its free heap pages, and the
// live heap, in bytes; zeros when the metrics are unknown.
func readHeld() (held, live uint64) {
	v, ok := readMetrics("/memory/classes/total:bytes", "/memory/classes/heap/released:bytes",
		"/memory/classes/heap/free:bytes", "/gc/heap/live:bytes")
	if !ok {
		return 0, 0
	}
	return v[0] - v[1] - v[2], v[3]
}

// readMetrics reads the runtime/metrics named (at most four), in bytes;
// false when one of them is unknown (not a uint64).
func readMetrics(names ...string) (v [4]uint64, ok bool) {
	var s [4]rtmetrics.Sample
	for i, n := range names {
		s[i].Name = n
	}
	rtmetrics.Read(s[:len(names)])
	for i := range names {
		if s[i].Value.Kind() != rtmetrics.KindUint64 {
			return v, false
		}
		v[i] = s[i].Value.Uint64()
	}
	return v, true
}

// changeLimit sets a memory limit for a change applied in place (the
// comparison of a new table with the one serving, and the patch it
// finds): what the runtime holds now besides free heap pages, plus a
// sixteenth of the live heap and 1 MiB, for the comparison's hashes and
// the garbage of reading the tables. Past it the collector runs as often
// as needed and the scavenger hands freed pages back at once, where GOGC's
// headroom and pages not yet returned would take the process about a
// table above its steady size. It never raises the limit: a lower
// GOMEMLIMIT stays. It returns the function that restores the limit before
// (to build whole, under buildMemory's limit).
func changeLimit() (restore func()) {
	const changeSlack = 1 << 20
	prev := debug.SetMemoryLimit(-1)
	held, live := readHeld()
	if held == 0 {
		return func() {}
	}
	if limit := int64(held) + int64(live)/16 + changeSlack; limit < prev {
		debug.SetMemoryLimit(limit)
	}
	return func() { debug.SetMemoryLimit(prev) }
}

// collect runs a collection: what a failed patch or comparison left (its
// hashes, converted entries) is freed before a whole build allocates.
func collect() { runtime.GC() }

// stageMemory readies the runtime for the stages of a large change
// (stages.go) and returns the function that undoes it: what the
// comparison left is collected and handed back, then a memory limit of
// what the runtime holds besides free heap pages, plus a third of the live
// heap and 1 MiB, bounds every stage. A stage adds a sixteenth of the
// table, but a limit that close to it made the collector run all the time
// (more than 200 collections for a change of 100,000 cluster-shaped
// services, twice the CPU time) for no lower peak: with a third, 90. A
// lower GOMEMLIMIT stays.
func stageMemory() (restore func()) {
	debug.FreeOSMemory()
	prev := debug.SetMemoryLimit(-1)
	held, live := readHeld()
	if held == 0 {
		return func() {}
	}
	if limit := int64(held) + int64(live)/3 + 1<<20; limit < prev {
		debug.SetMemoryLimit(limit)
	}
	return func() { debug.SetMemoryLimit(prev) }
}

// stageCollect frees what a stage emptied once its table serves: the old
// chunks, which the stage before held, and hands the pages back, so the
// next stage allocates in them, not beside them.
func stageCollect() { debug.FreeOSMemory() }
