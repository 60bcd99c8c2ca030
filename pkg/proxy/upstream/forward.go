package upstream

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// forward asks the upstreams for question q (lowercased wire form, name
// nameLen bytes) until one gives an acceptable reply.
func (r *Resolver) forward(ctx context.Context, q []byte, nameLen int) (*reply, error) {
	if r.cfg.Parallel && len(r.ups) > 1 {
		return r.race(ctx, q, nameLen)
	}
	order := r.perm(len(r.ups))
	var errs []error
	for i := range r.cfg.Attempts {
		up := r.ups[order[i%len(order)]]
		m, err := r.try(ctx, up, q, nameLen)
		if err == nil {
			return m, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("%w: %w", ErrUpstreamFailed, errors.Join(errs...))
}

// race sends one try to every upstream at once and returns the first good
// reply. The losers are cancelled and waited for, so no goroutine outlives
// the call.
func (r *Resolver) race(ctx context.Context, q []byte, nameLen int) (*reply, error) {
	ctx, cancel := context.WithCancel(ctx)
	type result struct {
		m   *reply
		err error
	}
	results := make(chan result, len(r.ups))
	var wg sync.WaitGroup
	for _, up := range r.ups {
		wg.Go(func() {
			m, err := r.try(ctx, up, q, nameLen)
			results <- result{m, err}
		})
	}
	defer func() {
		cancel()
		wg.Wait()
	}()
	var errs []error
	for range r.ups {
		res := <-results
		if res.err == nil {
			return res.m, nil
		}
		errs = append(errs, res.err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("%w: %w", ErrUpstreamFailed, errors.Join(errs...))
}
