package webhook

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// limits bounds what reviews in flight hold, whatever the senders do:
//
//   - every body is read up to smallBody without a slot: what a slow or
//     idle connection holds is its buffer, at most smallBody (and the
//     server bounds the connections);
//   - a body longer than that (no pod the API server sends is, but
//     anything that reaches the port may send one) needs one of the few
//     large slots before the rest is read, up to maxBody;
//   - decoding and deciding, which costs memory in proportion to the
//     body (decodePodHead bounds the factor), needs one of the decide
//     slots; reading a body never holds one, so a slow sender cannot keep
//     a normal review from its decision.
//
// A request that waits longer than wait for a slot gets 503 with
// Retry-After: the API server applies the webhook's failurePolicy, where a
// queue would only make every review late.
type limits struct {
	maxBody   int64
	smallBody int64
	large     chan struct{}
	decide    chan struct{}
	wait      time.Duration
}

// smallBody is the part of a body read without a slot: an AdmissionReview
// of an ordinary pod is a few KiB, one of a large one (many containers
// with long environments) a few tens.
const smallBody = 128 << 10

// errBusy is the 503 answer to a request that found no slot in time.
var errBusy = errors.New("webhook busy: too many reviews in flight")

func newLimits(maxBody int64, large, decide int, wait time.Duration) *limits {
	return &limits{maxBody: maxBody, smallBody: min(smallBody, maxBody),
		large: make(chan struct{}, large), decide: make(chan struct{}, decide), wait: wait}
}

// acquire takes one of slots, waiting at most l.wait.
func (l *limits) acquire(ctx context.Context, slots chan struct{}) error {
	select {
	case slots <- struct{}{}:
		return nil
	default:
	}
	t := time.NewTimer(l.wait)
	defer t.Stop()
	select {
	case slots <- struct{}{}:
		return nil
	case <-t.C:
		return errBusy
	case <-ctx.Done():
		return fmt.Errorf("wait for a review slot: %w", ctx.Err())
	}
}

// readBody reads r's body within the limits; release gives back what it
// holds once the body is no longer used. On error it returns the HTTP
// status to answer with.
func (l *limits) readBody(rw http.ResponseWriter, r *http.Request) (body []byte, release func(), status int, err error) {
	src := http.MaxBytesReader(rw, r.Body, l.maxBody)
	var buf bytes.Buffer
	if r.ContentLength > 0 {
		buf.Grow(int(min(r.ContentLength, l.smallBody+1)))
	}
	if _, err := buf.ReadFrom(io.LimitReader(src, l.smallBody+1)); err != nil {
		return nil, nil, bodyStatus(err), l.bodyError(err)
	}
	if int64(buf.Len()) <= l.smallBody {
		return buf.Bytes(), func() {}, 0, nil
	}
	if err := l.acquire(r.Context(), l.large); err != nil {
		return nil, nil, http.StatusServiceUnavailable, err
	}
	release = func() { <-l.large }
	if r.ContentLength > 0 {
		buf.Grow(max(0, int(min(r.ContentLength, l.maxBody))-buf.Len()))
	}
	if _, err := buf.ReadFrom(src); err != nil {
		release()
		return nil, nil, bodyStatus(err), l.bodyError(err)
	}
	return buf.Bytes(), release, 0, nil
}

func bodyStatus(err error) int {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return http.StatusRequestEntityTooLarge
	}
	return http.StatusBadRequest
}

func (l *limits) bodyError(err error) error {
	if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
		return fmt.Errorf("%w: body over %d bytes", errMalformed, l.maxBody)
	}
	return fmt.Errorf("%w: read body: %v", errMalformed, err)
}
