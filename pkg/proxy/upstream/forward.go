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
	m   *reply
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
func (r *Resolver) forward(ctx context.Context, q []byte, nameLen int, record bool) (*reply, error) {
	ctx, cancel := context.WithDeadline(ctx, time.Now().Add(r.cfg.window))
	ups, attempts := r.ups, r.cfg.Attempts
	if ro := r.routes.Load().routeFor(q, nameLen); ro != nil {
		ups, attempts = ro.ups, ro.attempts
	}
	results := make(chan result, attempts+len(ups))
	var wg sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
	}()
	if r.cfg.Parallel && len(ups) > 1 {
		return r.race(ctx, ups, q, nameLen, record, results, &wg)
	}
	order := r.perm(len(ups))
	launched, pending := 0, 0
	launch := func() {
		up := ups[order[launched%len(order)]]
		launched++
		pending++
		wg.Go(func() {
			m, err := r.try(ctx, up, q, nameLen, record)
			results <- result{m, err}
		})
	}
	launch()
	next := time.NewTimer(r.cfg.Timeout)
	defer next.Stop()
	var errs []error
	for {
		select {
		case res := <-results:
			pending--
			if res.err == nil {
				return res.m, nil
			}
			errs = append(errs, res.err)
			if err := ctx.Err(); err != nil {
				return nil, windowError(ctx, err, errs)
			}
			if launched < attempts {
				launch()
				next.Reset(r.cfg.Timeout)
			} else if pending == 0 {
				return nil, fmt.Errorf("%w: %w", ErrUpstreamFailed, errors.Join(errs...))
			}
		case <-next.C:
			if launched < attempts {
				launch()
				next.Reset(r.cfg.Timeout)
			}
		case <-ctx.Done():
			return nil, windowError(ctx, ctx.Err(), errs)
		}
	}
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
func (r *Resolver) race(ctx context.Context, ups []*upstream, q []byte, nameLen int, record bool, results chan result, wg *sync.WaitGroup) (*reply, error) {
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
		return nil, windowError(ctx, err, errs)
	}
	return nil, fmt.Errorf("%w: %w", ErrUpstreamFailed, errors.Join(errs...))
}
