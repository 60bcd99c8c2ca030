package server

import "time"

// buckets is a token bucket for each key (an identity, a peer address),
// with a count of what the key holds now (its streams open, or being
// authenticated). A bucket starts full and refills at rate tokens a second
// up to burst, both times the key's scale. Keys are forgotten only when
// the map reaches limit, and only those holding nothing: first those
// whose bucket is full again (they lose nothing), then, if that leaves
// limit or more (a flood of keys), every one holding nothing.
//
// Not safe for concurrent use: the owner's lock guards it, so that the
// owner can keep further state under the same lock.
type buckets[K comparable] struct {
	burst float64 // tokens of a key of scale 1
	rate  float64 // tokens a second, for a key of scale 1
	limit int     // keys remembered before the idle ones are forgotten
	m     map[K]*keyState
}

// keyState is the bucket of one key and what the key holds.
type keyState struct {
	tokens float64
	last   time.Time // of the last refill
	scale  float64   // units the key stands for, set when first seen
	held   int
}

func newBuckets[K comparable](burst, rate float64, limit int) buckets[K] {
	return buckets[K]{burst: burst, rate: rate, limit: limit, m: map[K]*keyState{}}
}

// get returns key's state refilled up to now; a key not seen before gets
// a full bucket of scale units (at least 1).
func (b *buckets[K]) get(key K, scale int, now time.Time) *keyState {
	st := b.m[key]
	if st == nil {
		if len(b.m) >= b.limit {
			b.prune(now)
		}
		st = &keyState{scale: float64(max(1, scale)), last: now}
		st.tokens = b.burst * st.scale
		b.m[key] = st
	}
	b.refill(st, now)
	return st
}

// lookup returns key's state refilled up to now, or nil if key is not
// remembered.
func (b *buckets[K]) lookup(key K, now time.Time) *keyState {
	st := b.m[key]
	if st != nil {
		b.refill(st, now)
	}
	return st
}

// take spends one token of st at now; an empty bucket stays empty.
func (b *buckets[K]) take(st *keyState, now time.Time) {
	b.refill(st, now)
	st.tokens = max(0, st.tokens-1)
}

func (b *buckets[K]) refill(st *keyState, now time.Time) {
	st.tokens = min(b.burst*st.scale, st.tokens+now.Sub(st.last).Seconds()*b.rate*st.scale)
	st.last = now
}

// full reports whether st's bucket would be full at now.
func (b *buckets[K]) full(st *keyState, now time.Time) bool {
	return st.tokens+now.Sub(st.last).Seconds()*b.rate*st.scale >= b.burst*st.scale
}

// prune forgets the keys holding nothing whose bucket is full again; if
// that leaves limit or more, every key holding nothing.
func (b *buckets[K]) prune(now time.Time) {
	for k, st := range b.m {
		if st.held == 0 && b.full(st, now) {
			delete(b.m, k)
		}
	}
	if len(b.m) < b.limit {
		return
	}
	for k, st := range b.m {
		if st.held == 0 {
			delete(b.m, k)
		}
	}
}
