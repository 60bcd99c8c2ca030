package upstream

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// clockTick is how often the coarse clock advances. Cache ages are whole
// seconds, so a reading up to 100ms old changes nothing a client can see
// beyond the rounding RFC 1035 TTLs already have.
const clockTick = 100 * time.Millisecond

// coarseClock is the cache's clock when Config.Now is nil. Reading the time
// costs ~100ns on the VMs we run on (half the cost of a whole cache hit,
// measured with pprof), so a goroutine stores it in an atomic every
// clockTick and hits just load it. The goroutine starts with the first
// reading, not in New (no side effects there), and stops at Close.
type coarseClock struct {
	nanos   atomic.Int64
	running atomic.Bool

	mu     sync.Mutex // guards following
	closed bool       // set by stop; no goroutine starts after it
}

// now returns unix nanoseconds, starting the ticker if needed. ctx and wg
// own the ticker goroutine.
func (c *coarseClock) now(ctx context.Context, wg *sync.WaitGroup) int64 {
	if c.running.Load() {
		return c.nanos.Load()
	}
	return c.start(ctx, wg)
}

func (c *coarseClock) start(ctx context.Context, wg *sync.WaitGroup) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running.Load() {
		return c.nanos.Load()
	}
	now := time.Now().UnixNano()
	if c.closed {
		return now // after Close: exact, slower, no goroutine
	}
	c.nanos.Store(now)
	c.running.Store(true)
	wg.Go(func() {
		t := time.NewTicker(clockTick)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-t.C:
				c.nanos.Store(now.UnixNano())
			}
		}
	})
	return now
}

// stop keeps a ticker from starting and sends later readings to the exact
// clock (the ticker is about to end, and a frozen clock would keep cache
// entries fresh forever); the caller then ends ctx and waits.
func (c *coarseClock) stop() {
	c.mu.Lock()
	c.closed = true
	c.running.Store(false)
	c.mu.Unlock()
}
