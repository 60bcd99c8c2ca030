package upstream

import (
	"context"
	"sync"
	"time"

	"github.com/meshdns/meshdns/pkg/metric"
	"github.com/meshdns/meshdns/pkg/proxy/upstream/cache"
)

// answer is what a flight produces: an entry to build replies from and the
// TTL to write, or an error.
type answer struct {
	e   *cache.Entry
	ttl uint32
	src Source
	err error
	// from is the upstream that answered (src SourceUpstream), or "".
	from string
	// fwd is the exchange, when the flight was asked to record it.
	fwd *Forwarded
}

// flightAsk is the question a flight resolves: its key in the flights' map
// (the lowercased question), the length of its name, and whether to record
// the exchange.
type flightAsk struct {
	key     string
	nameLen int
	record  bool
}

// call is one in-flight question.
type call struct {
	// done is closed when res is set; made (under flights.mu) only when
	// someone waits: a flight its first caller runs alone needs none.
	done chan struct{}
	res  answer
}

// flights coalesces identical in-flight questions: the first asker starts
// the work, later ones wait for its answer (a hand-rolled singleflight so
// that waiters can give up on their own context).
type flights struct {
	mu     sync.Mutex       // guards following
	m      map[string]*call // by lowercased question
	closed bool             // no new calls; set before the WaitGroup is waited on

	joined *metric.Counter // counts callers that joined a call in flight
}

// close refuses new calls, so the WaitGroup gains no goroutine once Close
// waits on it.
func (f *flights) close() {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
}

// do returns fn's answer for a, running fn at most once for concurrent
// callers; shared reports whether this caller joined a call already in
// flight. The first caller runs fn itself, on its own goroutine, with a
// context that ends with ctx, with the Resolver (base) or window after now
// (its deadline: forward's window, so forward makes no context of its
// own): a miss then costs no hand-over. When the caller may give up early
// (giveUp, for serve-stale) fn runs on a goroutine owned by wg instead, so
// the refresh goes on and lands in the cache after the caller has answered
// stale. Waiters return on their own ctx's end or giveUp.
func (f *flights) do(ctx, base context.Context, wg *sync.WaitGroup, a flightAsk, window time.Duration, giveUp <-chan time.Time, fn func(context.Context, flightAsk) answer) (res answer, shared bool) {
	key := a.key
	f.mu.Lock()
	c, shared := f.m[key]
	if !shared && f.closed {
		f.mu.Unlock()
		return answer{src: SourceUpstream, err: ErrClosed}, false
	}
	if !shared {
		c = &call{}
		f.m[key] = c
		if giveUp == nil {
			f.mu.Unlock()
			run, cancel := context.WithDeadline(base, time.Now().Add(window))
			stop := context.AfterFunc(ctx, cancel)
			res := fn(run, a)
			stop()
			cancel()
			f.finish(key, c, res)
			if err := ctx.Err(); err != nil && res.err != nil {
				res.err = err // the caller's own end, as a waiter would see it
			}
			return res, false
		}
		c.done = make(chan struct{})
		f.mu.Unlock()
		wg.Go(func() { f.finish(key, c, fn(base, a)) })
	} else {
		if c.done == nil {
			c.done = make(chan struct{})
		}
		f.mu.Unlock()
		// Counted at once, not on return, so the metric shows waiters.
		f.joined.Inc()
	}
	select {
	case <-c.done:
		return c.res, shared
	case <-ctx.Done():
		return answer{err: ctx.Err()}, shared
	case <-giveUp: // nil unless the caller has something better to say
		return answer{err: errSlow}, shared
	}
}

// finish publishes a call's answer to its waiters.
func (f *flights) finish(key string, c *call, res answer) {
	f.mu.Lock()
	delete(f.m, key)
	c.res = res
	done := c.done
	f.mu.Unlock()
	if done != nil {
		close(done)
	}
}

// start runs fn for key on a goroutine owned by wg, unless a call for key
// is in flight already (its answer will do) or the flights are closed; it
// reports whether it started one. It never waits: prefetch calls it from a
// cache hit.
func (f *flights) start(base context.Context, wg *sync.WaitGroup, key string, fn func(context.Context) answer) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, busy := f.m[key]; busy || f.closed {
		return false
	}
	c := &call{}
	f.m[key] = c
	// Under mu, so close (which takes mu before the WaitGroup is waited
	// on) cannot miss this goroutine.
	wg.Go(func() { f.finish(key, c, fn(base)) })
	return true
}
