package ingest

import (
	"errors"
	"sync/atomic"
)

// A build and a table file's first walk each produce batches on a
// goroutine of their own (converted entries, wire form) that the caller's
// goroutine consumes as they come: the sidecar has two cores and no CPU
// limit, and one did all the work.

// pipeDepth is how many batches wait for the consumer at most: a pipe
// holds pipeDepth+1 batches whatever the table's size.
const pipeDepth = 4

// errPipeStopped stops the producing goroutine once the consumer failed.
var errPipeStopped = errors.New("walk stopped")

// pipe carries batches from a producer to the consumer and back: a batch
// is taken free, filled and sent full, consumed, and free again.
type pipe[B any] struct {
	full chan B
	free chan B
	stop atomic.Bool // the consumer failed: the producer stops
}

// next is the producer's next batch to fill (consumed before).
func (p *pipe[B]) next() B { return <-p.free }

// send hands the consumer a filled batch.
func (p *pipe[B]) send(b B) { p.full <- b }

// stopped reports whether the consumer failed, so the producer's walk
// ends (with errPipeStopped).
func (p *pipe[B]) stopped() bool { return p.stop.Load() }

// runPipe runs produce on a goroutine of its own with a pipe of
// pipeDepth+1 batches made by batch, and consume on the caller's for each
// batch produce sends, in order, until produce returns. After a failure of
// consume the batches still sent are not consumed, and the producer sees
// stopped. The error is consume's first, else produce's: a failure of the
// producer is at a batch after those consumed.
func runPipe[B any](batch func() B, produce func(p *pipe[B]) error, consume func(b B) error) error {
	p := &pipe[B]{full: make(chan B, pipeDepth), free: make(chan B, pipeDepth+1)}
	for range pipeDepth + 1 {
		p.free <- batch()
	}
	done := make(chan error, 1)
	go func() {
		defer close(p.full)
		done <- produce(p)
	}()
	var err error
	for b := range p.full {
		if err == nil {
			if err = consume(b); err != nil {
				p.stop.Store(true)
			}
		}
		p.free <- b
	}
	if perr := <-done; err == nil {
		err = perr
	}
	return err
}
