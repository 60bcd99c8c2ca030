package server

import (
	"context"
	"runtime"
	"sync"
)

// fanout sends new versions to agents from a few shared goroutines instead
// of one waiting goroutine per stream: a version published to 10,000
// agents costs 10,000 queue entries, not 10,000 goroutine wake-ups, and
// every stream saves a goroutine stack. A send only hands the response to
// gRPC's per-connection writer, which never blocks while the stream has
// write quota; agents that could make it block are held back instead
// (agent.canSendLocked), so a slow agent never stalls the others. An
// agent's stream served by agentstream is written by the worker itself
// (framed and written without waiting: a send is CPU work only), so the
// workers run through the queue without yielding.
type fanout struct {
	mu     sync.Mutex // guards following
	cond   sync.Cond  // signalled when q gains an agent or the fanout stops
	q      []*agent   // agents to look at, from head on
	head   int
	closed bool

	// yield lets the connections' writers woken by a batch run before
	// the worker wakes more: for streams grpc-go serves (set before run).
	yield bool
}

// fanoutBatch is how many agents a worker takes at once: enough to make
// the queue lock cheap, few enough that the other workers get a share.
const fanoutBatch = 64

func newFanout() *fanout {
	f := &fanout{}
	f.cond.L = &f.mu
	return f
}

// push queues a; it never blocks (the store calls it with a view locked).
func (f *fanout) push(a *agent) {
	f.mu.Lock()
	f.q = append(f.q, a)
	f.mu.Unlock()
	f.cond.Signal()
}

// run sends until ctx ends, on GOMAXPROCS goroutines: sends are CPU work
// (no waiting), so more workers would only queue for the cores.
func (f *fanout) run(ctx context.Context, send func(*agent)) {
	stop := context.AfterFunc(ctx, func() {
		f.mu.Lock()
		f.closed = true
		f.mu.Unlock()
		f.cond.Broadcast()
	})
	defer stop()
	var wg sync.WaitGroup
	for range runtime.GOMAXPROCS(0) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			batch := make([]*agent, 0, fanoutBatch)
			for {
				batch = f.pop(batch[:0])
				if batch == nil {
					return
				}
				for i, a := range batch {
					send(a)
					batch[i] = nil
				}
				if f.yield {
					// A grpc-go writer with a small frame yields once
					// before it flushes, holding a pooled 16 KiB write
					// buffer; with 10,000 of them woken back to back,
					// those yields piled up behind the workers and the
					// pool missed ~1,250 times per version (20 MB of
					// garbage). Yielding puts the worker behind them.
					runtime.Gosched()
				}
			}
		}()
	}
	wg.Wait()
}

// pop waits for agents and appends up to fanoutBatch of them to buf; nil
// once the fanout stopped.
func (f *fanout) pop(buf []*agent) []*agent {
	f.mu.Lock()
	defer f.mu.Unlock()
	for f.head == len(f.q) && !f.closed {
		f.cond.Wait()
	}
	if f.closed {
		return nil
	}
	end := min(len(f.q), f.head+fanoutBatch)
	buf = append(buf, f.q[f.head:end]...)
	clear(f.q[f.head:end])
	f.head = end
	switch {
	case f.head == len(f.q):
		f.q, f.head = f.q[:0], 0
	case f.head > len(f.q)/2:
		// Never drained under a steady stream of pushes: reuse the
		// front instead of growing the slice.
		n := copy(f.q, f.q[f.head:])
		clear(f.q[n:])
		f.q, f.head = f.q[:n], 0
		fallthrough
	default:
		f.cond.Signal() // more left: wake another worker
	}
	return buf
}
