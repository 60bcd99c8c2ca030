package server

import "time"

// bucket is the token bucket of one key (an identity, a peer address):
// it refills at rate tokens a second up to burst.
type bucket struct {
	tokens float64
	last   time.Time
}

// refill brings b up to now.
func (b *bucket) refill(now time.Time, burst, rate float64) {
	b.tokens = min(burst, b.tokens+now.Sub(b.last).Seconds()*rate)
	b.last = now
}

// full reports whether b would be full at now.
func (b *bucket) full(now time.Time, burst, rate float64) bool {
	return b.tokens+now.Sub(b.last).Seconds()*rate >= burst
}

// pruneIdle forgets the entries of m that hold nothing (idle) and whose
// bucket is full again: they lose nothing. If that leaves limit or more
// (a flood of keys), it forgets every idle entry.
func pruneIdle[K comparable, V any](m map[K]V, limit int, idle func(V) bool, full func(V) bool) {
	for k, v := range m {
		if idle(v) && full(v) {
			delete(m, k)
		}
	}
	if len(m) < limit {
		return
	}
	for k, v := range m {
		if idle(v) {
			delete(m, k)
		}
	}
}
