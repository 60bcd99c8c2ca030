package server

import (
	"context"
	"sync"
	"time"
)

// admission paces new streams. When a control plane restarts, every agent
// reconnects within seconds; serving them all at once would build every
// first response together (a full table each for agents whose version is
// gone) and queue them on thousands of connections. Instead at most
// Config.MaxAdmissions streams are between their first request and the
// agent's first answer (ACK or NACK); the others wait their turn, which
// costs a parked goroutine and nothing else. A stream that has not
// answered after admitTimeout gives its slot back anyway, so agents that
// never answer cannot stop admissions.
type admission struct {
	slots chan struct{}
	m     *metrics
}

// admitTimeout is how long an admitted stream may hold its slot without
// answering; far longer than a full table takes on a healthy connection.
const admitTimeout = 10 * time.Second

func newAdmission(n int, m *metrics) *admission {
	return &admission{slots: make(chan struct{}, n), m: m}
}

// acquire waits for a slot; the returned release is idempotent and safe
// to call from any goroutine.
func (ad *admission) acquire(ctx context.Context) (release func(), err error) {
	select {
	case ad.slots <- struct{}{}:
	default:
		ad.m.admissionWaiting.Inc()
		select {
		case ad.slots <- struct{}{}:
			ad.m.admissionWaiting.Dec()
		case <-ctx.Done():
			ad.m.admissionWaiting.Dec()
			return nil, ctx.Err()
		}
	}
	var once sync.Once
	free := func() { once.Do(func() { <-ad.slots }) }
	t := time.AfterFunc(admitTimeout, free)
	return func() { t.Stop(); free() }, nil
}
