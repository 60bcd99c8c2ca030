package metric

import (
	"fmt"
	"math/bits"
	"sync/atomic"
)

// Pow2Buckets are the bounds of a Pow2Histogram: n powers of two, 2^shift,
// 2^(shift+step), ..., counted in whole units (nanoseconds, bytes) and
// written times unit (1e-9: nanoseconds as seconds). Bounds that are
// powers of two let an observation find its bucket with one bits.Len64
// and a table lookup, and an integer sum is one atomic add: no float
// search, no compare-and-swap loop. NewPow2Buckets makes them.
type Pow2Buckets struct {
	bounds []float64 // written; Family.Buckets
	unit   float64
	// index is the bucket of v by bits.Len64(v-1), the smallest k with
	// v <= 2^k (k is 0 to 64).
	index [65]uint8
}

// NewPow2Buckets returns the n bounds 2^shift, 2^(shift+step), ... up to
// 2^63, each written times unit. They are constants of the program, so bad
// ones panic.
func NewPow2Buckets(shift, step, n int, unit float64) *Pow2Buckets {
	if shift < 0 || step < 1 || n < 1 || shift+(n-1)*step > 63 || !(unit > 0) {
		panic(fmt.Sprintf("metric: NewPow2Buckets(%d, %d, %d, %v): want bounds from 2^0 to 2^63 and a positive unit", shift, step, n, unit))
	}
	b := &Pow2Buckets{bounds: make([]float64, n), unit: unit}
	for i := range b.bounds {
		b.bounds[i] = float64(uint64(1)<<(shift+i*step)) * unit
	}
	for k := range b.index {
		i := 0
		if k > shift {
			i = (k - shift + step - 1) / step // ceil: the first bound 2^(shift+i*step) >= 2^k
		}
		b.index[k] = uint8(min(i, n))
	}
	return b
}

// Bounds returns the bucket bounds as written, for Family.Buckets; the
// slice is shared and must not be changed.
func (b *Pow2Buckets) Bounds() []float64 { return b.bounds }

// Bucket returns the index of the smallest bound at least v, or
// len(Bounds()) for +Inf.
func (b *Pow2Buckets) Bucket(v uint64) int {
	if v == 0 {
		return 0
	}
	return int(b.index[bits.Len64(v-1)])
}

// Pow2Histogram counts whole-unit observations in Pow2Buckets, each with
// a weight (a sampled observation stands for weight of them), without a
// lock: two atomic adds. NewPow2Histogram makes one.
type Pow2Histogram struct {
	b      *Pow2Buckets
	counts []atomic.Uint64 // per bucket, not cumulative; the last is +Inf
	sum    atomic.Uint64   // whole units
}

// NewPow2Histogram returns a histogram with the bounds b, which the
// histograms of one family share.
func NewPow2Histogram(b *Pow2Buckets) *Pow2Histogram {
	return &Pow2Histogram{b: b, counts: make([]atomic.Uint64, len(b.bounds)+1)}
}

// Observe counts v, weight times.
func (h *Pow2Histogram) Observe(v, weight uint64) {
	h.counts[h.b.Bucket(v)].Add(weight)
	h.sum.Add(v * weight)
}

// Series returns h's series with labelValues: its cumulative counts (a
// new slice), +Inf last, and its sum times the unit.
func (h *Pow2Histogram) Series(labelValues ...string) Series {
	return Series{LabelValues: labelValues, Counts: cumulative(h.counts), Sum: float64(h.sum.Load()) * h.b.unit}
}
