package ingest

import (
	"context"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestWorthIt(t *testing.T) {
	tests := []struct {
		name          string
		reclaim, live uint64
		want          bool
	}{
		{name: "nothing", reclaim: 0, live: 30 << 20, want: false},
		{name: "under a MiB", reclaim: 1 << 19, live: 1 << 20, want: false},
		{name: "under a sixteenth of a big heap", reclaim: 1 << 21, live: 64 << 20, want: false},
		{name: "over a sixteenth", reclaim: 5 << 20, live: 64 << 20, want: true},
		{name: "over a MiB beside a small heap", reclaim: 2 << 20, live: 4 << 20, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := worthIt(tt.reclaim, tt.live); got != tt.want {
				t.Errorf("worthIt(%d, %d) = %v, want %v", tt.reclaim, tt.live, got, tt.want)
			}
		})
	}
}

// The releaser frees memory after a kick, and on its periodic look only
// when enough is reclaimable. It runs on synctest's clock, so "six looks
// found nothing" is exact, not a guess about how long a sleep lasts.
func TestMemoryReleaser(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var releases, looks atomic.Int32
		var reclaim atomic.Uint64
		r := NewReleaser(time.Millisecond, 5*time.Millisecond)
		r.release = func() { releases.Add(1) }
		r.reclaimable = func() (uint64, uint64) {
			looks.Add(1)
			return reclaim.Load(), 8 << 20
		}
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error, 1)
		go func() { done <- r.Run(ctx) }()

		time.Sleep(32 * time.Millisecond) // looks at 5, 10, ... 30 ms
		synctest.Wait()
		if n, l := releases.Load(), looks.Load(); n != 0 || l != 6 {
			t.Fatalf("%d releases after %d looks with nothing reclaimable, want 0 after 6", n, l)
		}
		r.Kick()
		synctest.Wait()
		if n := releases.Load(); n != 1 {
			t.Fatalf("%d releases after a kick, want 1", n)
		}
		reclaim.Store(16 << 20)
		time.Sleep(5 * time.Millisecond) // the next look
		synctest.Wait()
		if n := releases.Load(); n != 2 {
			t.Fatalf("%d releases after a look finding 16 MiB reclaimable, want 2", n)
		}
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// readReclaimable reads the runtime's figures: after garbage is made,
// something is reclaimable and the live heap is known.
func TestReadReclaimable(t *testing.T) {
	// A collection first, so the live heap is known; then none may run
	// between making the garbage and the reading (other tests allocate
	// too).
	runtime.GC()
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	keep := make([][]byte, 0, 64)
	for range 64 {
		keep = append(keep, make([]byte, 64<<10))
	}
	keep = keep[:0]
	reclaim, live := readReclaimable()
	if live == 0 {
		t.Errorf("live heap 0 bytes")
	}
	if reclaim < 1<<20 {
		t.Errorf("reclaimable %d bytes after dropping 4 MiB, want at least 1 MiB", reclaim)
	}
	_ = keep
}

// A build lowers GOGC (never raises it, never turns it on) and, when it
// replaces a table, sets a memory limit above what is live; both are
// restored afterwards, and a lower GOMEMLIMIT is left alone.
func TestBuildMemory(t *testing.T) {
	const noLimit = int64(1) << 62
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(noLimit))
	tests := []struct {
		name      string
		gogc      int
		userLimit int64
		replacing bool
		wantGC    int
		lowered   bool // a limit under userLimit during the build
		gcLowered bool // buildMemory says it lowered GOGC
	}{
		{name: "first table", gogc: 100, userLimit: noLimit, wantGC: buildGCPercent, gcLowered: true},
		{name: "replacement", gogc: 100, userLimit: noLimit, replacing: true, wantGC: buildGCPercent, lowered: true, gcLowered: true},
		{name: "GOGC already lower", gogc: 10, userLimit: noLimit, replacing: true, wantGC: 10, lowered: true},
		{name: "GOGC off", gogc: -1, userLimit: noLimit, replacing: true, wantGC: -1, lowered: true},
		// A limit under what the build would set: kept as it is.
		{name: "lower GOMEMLIMIT", gogc: 100, userLimit: 1 << 20, replacing: true, wantGC: buildGCPercent, gcLowered: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			debug.SetGCPercent(tt.gogc)
			debug.SetMemoryLimit(tt.userLimit)
			done, gcLowered := buildMemory(tt.replacing)
			if gcLowered != tt.gcLowered {
				t.Errorf("buildMemory says it lowered GOGC: %v, want %v", gcLowered, tt.gcLowered)
			}
			gc := debug.SetGCPercent(tt.gogc)
			debug.SetGCPercent(gc)
			limit := debug.SetMemoryLimit(-1)
			done()
			if gc != tt.wantGC {
				t.Errorf("GOGC during the build = %d, want %d", gc, tt.wantGC)
			}
			held, live := readHeld()
			if tt.lowered && (limit >= tt.userLimit || uint64(limit) < held+live) {
				t.Errorf("limit during the build = %d, want under %d and over held %d + live %d", limit, tt.userLimit, held, live)
			}
			if !tt.lowered && limit != tt.userLimit {
				t.Errorf("limit during the build = %d, want %d kept", limit, tt.userLimit)
			}
			if got := debug.SetGCPercent(tt.gogc); got != tt.gogc {
				t.Errorf("GOGC after = %d, want %d restored", got, tt.gogc)
			}
			if got := debug.SetMemoryLimit(-1); got != tt.userLimit {
				t.Errorf("limit after = %d, want %d restored", got, tt.userLimit)
			}
		})
	}
}

// TestStartPace checks the GOGC a start's build runs at as its names come:
// the highest while the heap is far from the finished build's, down to
// buildGCPercent at the end, the heap goal within startPeak of the end's
// throughout.
func TestStartPace(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	const names = 100_000
	pace := startPace(names)
	gogc := func() int {
		g := debug.SetGCPercent(-1)
		debug.SetGCPercent(g)
		return g
	}
	for _, tt := range []struct {
		added  int
		wantGC int
	}{
		{added: 0, wantGC: startGCPercent},
		{added: names / 2, wantGC: startGCPercent},
		{added: names * 4 / 5, wantGC: 56},
		{added: names, wantGC: buildGCPercent},
		{added: 2 * names, wantGC: buildGCPercent}, // more than counted
	} {
		pace(tt.added)
		if got := gogc(); got != tt.wantGC {
			t.Errorf("GOGC at %d of %d names = %d, want %d", tt.added, names, got, tt.wantGC)
		}
		if goal := float64(tt.added) / names * (1 + float64(gogc())/100); tt.added <= names && goal > startPeak+1e-9 {
			t.Errorf("heap goal at %d of %d names = %.3f of the finished build's, more than %.2f", tt.added, names, goal, startPeak)
		}
	}
}
