package upstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// result is what one try came back with.
type result struct {
	m   reply
	err error
}

// forward asks the upstreams for question q (lowercased wire form, name
// nameLen bytes) until one gives an acceptable reply or the client's
// patience is spent.
//
// The schedule (README.md, Attempt schedule): a try goes out at once and
// another every Timeout while tries remain, each to the next upstream in a
// random order; a try that fails early (SERVFAIL, REFUSED, an unreachable
// port) starts the next one at once. No try stops listening when the next
// starts: every socket stays open until the window ends, so a slow reply to
// the first try is still taken after the second went out. The window is
// the client's timeout less a margin, so the client hears our answer (or
// our SERVFAIL) before it gives up on us. With record the reply carries
// the exchange it came from.
//
// ctx's deadline, when it has one, is the window's end: a flight's context
// carries it (flights.do), so the query that is answered by its first try
// makes no context and no timer of its own.
func (r *Resolver) forward(ctx context.Context, q []byte, nameLen int, record bool) (reply, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, time.Now().Add(r.cfg.window))
		defer cancel()
	}
	ups, attempts := r.ups, r.cfg.Attempts
	if ro := r.routes.Load().routeFor(q, nameLen); ro != nil {
		ups, attempts = ro.ups, ro.attempts
	}
	if r.cfg.Parallel && len(ups) > 1 {
		ctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		defer func() {
			cancel()
			wg.Wait()
		}()
		return r.race(ctx, ups, q, nameLen, record, make(chan result, len(ups)), &wg)
	}
	order := onlyFirst
	if len(ups) > 1 {
		order = r.perm(len(ups))
	}
	// The first try waits on this goroutine while it is the only one:
	// most are answered within Timeout, and a goroutine per try, its
	// channel and its timer were most of a forwarded query's hand-offs.
	first := time.Now()
	rep, err, rest := r.tryFirst(ctx, ups[order[0]], q, nameLen, record, first)
	if rest == nil && err == nil {
		return rep, nil
	}
	// From here tries run on goroutines: cancelling ctx when forward
	// returns ends the ones still listening, before they are waited for.
	ctx, cancel := context.WithCancel(ctx)
	s := &schedule{r: r, ctx: ctx, ups: ups, order: order, attempts: attempts, q: q, nameLen: nameLen,
		record: record, launched: 1, results: make(chan result, attempts+len(ups))}
	defer func() {
		cancel()
		s.wg.Wait()
	}()
	wait := time.Duration(0) // a failed first try: the next goes out at once
	if rest != nil {
		wait = r.cfg.Timeout - time.Since(first)
		s.pending = 1
		s.wg.Go(func() {
			m, err := rest(ctx)
			s.results <- result{m, err}
		})
	} else {
		s.errs = append(s.errs, err)
		if err := ctx.Err(); err != nil {
			return reply{}, windowError(ctx, err, s.errs)
		}
	}
	return s.run(wait)
}

// schedule is the rest of forward's schedule once the first try has
// failed or waited Timeout alone: the tries after it, every Timeout or at
// once after a failure, on goroutines, each listening until the window
// ends.
type schedule struct {
	r                 *Resolver
	ctx               context.Context
	wg                sync.WaitGroup // the tries' goroutines
	ups               []*upstream
	order             []int
	attempts          int
	q                 []byte
	nameLen           int
	record            bool
	launched, pending int
	results           chan result
	errs              []error
}

// launch starts the next try on a goroutine.
func (s *schedule) launch() {
	up := s.ups[s.order[s.launched%len(s.order)]]
	s.launched++
	s.pending++
	s.wg.Go(func() {
		m, err := s.r.try(s.ctx, up, s.q, s.nameLen, s.record)
		s.results <- result{m, err}
	})
}

// run goes on from the first try: the next try goes out after wait (at
// once when the first failed or has waited its Timeout alone), then one
// every Timeout or at once after a failure, until a reply or the end.
func (s *schedule) run(wait time.Duration) (reply, error) {
	if wait <= 0 {
		if s.launched < s.attempts {
			s.launch()
		} else if s.pending == 0 {
			return reply{}, fmt.Errorf("%w: %w", ErrUpstreamFailed, errors.Join(s.errs...))
		}
		wait = s.r.cfg.Timeout
	}
	next := time.NewTimer(wait)
	defer next.Stop()
	for {
		select {
		case res := <-s.results:
			s.pending--
			if res.err == nil {
				return res.m, nil
			}
			s.errs = append(s.errs, res.err)
			if err := s.ctx.Err(); err != nil {
				return reply{}, windowError(s.ctx, err, s.errs)
			}
			if s.launched < s.attempts {
				s.launch()
				next.Reset(s.r.cfg.Timeout)
			} else if s.pending == 0 {
				return reply{}, fmt.Errorf("%w: %w", ErrUpstreamFailed, errors.Join(s.errs...))
			}
		case <-next.C:
			if s.launched < s.attempts {
				s.launch()
				next.Reset(s.r.cfg.Timeout)
			}
		case <-s.ctx.Done():
			return reply{}, windowError(s.ctx, s.ctx.Err(), s.errs)
		}
	}
}

// onlyFirst is the order of a single upstream: no permutation to make.
var onlyFirst = []int{0}

// tryFirst runs forward's first try on the caller's goroutine until it
// has a reply or an error, or Timeout from start has passed (rest then finishes the
// try: forward runs it on a goroutine while the next try goes out). A
// reply that asks again (FORMERR without EDNS, truncated) is finished by
// rest too, so the schedule's Timeout runs meanwhile. Over DNS over TLS
// the whole try is rest. rest gets the schedule's context, a child of
// ctx that ends when forward returns.
func (r *Resolver) tryFirst(ctx context.Context, up *upstream, q []byte, nameLen int, record bool, start time.Time) (reply, error, func(context.Context) (reply, error)) {
	if up.dot != nil {
		return reply{}, nil, func(ctx context.Context) (reply, error) { return r.try(ctx, up, q, nameLen, record) }
	}
	a := attempt{up: up, start: start, rec: newRecord(record)}
	until := start.Add(r.cfg.Timeout)
	if window := r.deadline(ctx); window.Before(until) {
		until = window
	}
	x, err := r.sendUDP(ctx, up, q, true, a.rec, until)
	if err != nil {
		rep, err := r.settle(ctx, a, q, nameLen, upReply{}, err)
		return rep, err, nil
	}
	m, aerr := r.awaitUDP(ctx, x, up, q, nameLen, a.rec)
	if errors.Is(aerr, errSoftDeadline) {
		return reply{}, nil, func(ctx context.Context) (reply, error) {
			// The read is interrupted at the schedule's end now.
			x.stop()
			x.stop = context.AfterFunc(ctx, x.interrupt)
			defer x.close(r)
			// SetReadDeadline before ctx.Err: a cancellation after it
			// interrupts the read (the AfterFunc).
			if err := x.conn.SetReadDeadline(r.deadline(ctx)); err != nil {
				return r.settle(ctx, a, q, nameLen, upReply{}, ioError("deadline udp", up, err))
			}
			if err := ctx.Err(); err != nil {
				return r.settle(ctx, a, q, nameLen, upReply{}, err)
			}
			m, err := r.awaitUDP(ctx, x, up, q, nameLen, a.rec)
			return r.settle(ctx, a, q, nameLen, m, err)
		}
	}
	x.close(r)
	if retries(m, aerr) {
		return reply{}, nil, func(ctx context.Context) (reply, error) { return r.settle(ctx, a, q, nameLen, m, aerr) }
	}
	rep, err := r.settle(ctx, a, q, nameLen, m, aerr)
	return rep, err, nil
}

// windowError is the error of a forward whose context ended: the caller's
// cancellation as it is, the window's end as a failed upstream.
func windowError(ctx context.Context, err error, errs []error) error {
	if errors.Is(err, context.DeadlineExceeded) && context.Cause(ctx) == context.DeadlineExceeded {
		errs = append(errs, errors.New("no reply within the client's timeout"))
		return fmt.Errorf("%w: %w", ErrUpstreamFailed, errors.Join(errs...))
	}
	return err
}

// race sends one try to every upstream at once and returns the first good
// reply; each listens until the window ends. The losers are cancelled and
// waited for by forward, so no goroutine outlives the call.
func (r *Resolver) race(ctx context.Context, ups []*upstream, q []byte, nameLen int, record bool, results chan result, wg *sync.WaitGroup) (reply, error) {
	for _, up := range ups {
		wg.Go(func() {
			m, err := r.try(ctx, up, q, nameLen, record)
			results <- result{m, err}
		})
	}
	var errs []error
	for range ups {
		res := <-results
		if res.err == nil {
			return res.m, nil
		}
		errs = append(errs, res.err)
	}
	if err := ctx.Err(); err != nil {
		return reply{}, windowError(ctx, err, errs)
	}
	return reply{}, fmt.Errorf("%w: %w", ErrUpstreamFailed, errors.Join(errs...))
}
