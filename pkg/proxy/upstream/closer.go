package upstream

import (
	"context"
	"io"
	"sync"
	"time"
)

const (
	// closeEvery is how long a finished try's socket may stay open.
	closeEvery = 100 * time.Millisecond
	// closeBatch pending sockets are closed at once: few, so that a
	// batch holds the core for tens of microseconds, not milliseconds
	// (a hundred milliseconds of forwarded queries closed at once set
	// the p99 of the answers waiting behind them).
	closeBatch = 8
)

// closer closes the UDP sockets of finished tries off the query's path,
// in batches on a goroutine of its own. Closing is the one system call of
// a try that enters the scheduler's system call state (udpsock_linux.go),
// which wakes the runtime's monitor thread when the process was idle: on
// one core that thread then runs before the reply goes out. Batched, one
// wake-up serves many sockets, after their replies were sent. A socket
// waiting here has its query answered; a late datagram only queues in it.
type closer struct {
	mu      sync.Mutex  // guards following
	pending []io.Closer // finished, to close
	running bool        // the goroutine was started
	closed  bool        // stop ran: close at once
	kick    chan struct{}
}

// add hands c over to be closed within closeEvery. The goroutine starts
// with the first socket (owned by wg, ending with ctx), not in New.
func (cl *closer) add(ctx context.Context, wg *sync.WaitGroup, c io.Closer) {
	cl.mu.Lock()
	if cl.closed {
		cl.mu.Unlock()
		_ = c.Close()
		return
	}
	cl.pending = append(cl.pending, c)
	full := len(cl.pending) >= closeBatch
	if !cl.running {
		cl.running = true
		cl.kick = make(chan struct{}, 1)
		wg.Go(func() { cl.loop(ctx) })
	}
	cl.mu.Unlock()
	if full {
		select {
		case cl.kick <- struct{}{}:
		default:
		}
	}
}

// loop closes the pending sockets every closeEvery, or at once when a
// batch is full, until ctx ends.
func (cl *closer) loop(ctx context.Context) {
	t := time.NewTicker(closeEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-cl.kick:
		}
		cl.flush()
	}
}

// flush closes the sockets pending now.
func (cl *closer) flush() {
	cl.mu.Lock()
	batch := cl.pending
	cl.pending = nil
	cl.mu.Unlock()
	for _, c := range batch {
		_ = c.Close()
	}
}

// stop makes add close at once and start no goroutine, so the WaitGroup
// gains none once Close waits on it; Close calls it before it ends ctx,
// and flush once the goroutine ended.
func (cl *closer) stop() {
	cl.mu.Lock()
	cl.closed = true
	cl.mu.Unlock()
}
