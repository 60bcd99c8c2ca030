package metric

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"
)

// Histogram counts float observations (seconds) in fixed buckets, without
// a lock: one atomic add for the bucket, a compare-and-swap for the sum.
// NewHistogram makes one.
type Histogram struct {
	upper  []float64       // bucket upper bounds, ascending, without +Inf; shared
	counts []atomic.Uint64 // per bucket, not cumulative; the last is +Inf
	sum    atomic.Uint64   // float64 bits
}

// NewHistogram returns a histogram with the upper bounds upper (ascending,
// finite, at least one; +Inf is implied), which it keeps and never
// changes: the histograms of one family share them. Bounds are constants
// of the program, so bad ones panic.
func NewHistogram(upper []float64) *Histogram {
	checkBuckets(upper)
	return &Histogram{upper: upper, counts: make([]atomic.Uint64, len(upper)+1)}
}

func checkBuckets(b []float64) {
	if len(b) == 0 || !slices.IsSorted(b) || slices.Contains(b, math.Inf(1)) || len(slices.Compact(slices.Clone(b))) != len(b) {
		panic(fmt.Sprintf("metric: buckets %v: want ascending, distinct, finite and at least one", b))
	}
}

// Observe records v in the first bucket whose bound is at least v.
func (h *Histogram) Observe(v float64) {
	// Few buckets: a linear scan beats a binary search's branches.
	i := 0
	for i < len(h.upper) && v > h.upper[i] {
		i++
	}
	h.counts[i].Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// Series returns h's series with labelValues: its cumulative counts (a
// new slice), +Inf last, and its sum. A scrape that races observations
// may see the sum behind the counts; the +Inf bucket is the sum of the
// others, so the buckets stay monotonic.
func (h *Histogram) Series(labelValues ...string) Series {
	return Series{LabelValues: labelValues, Counts: cumulative(h.counts), Sum: math.Float64frombits(h.sum.Load())}
}

// cumulative returns the running totals of counts.
func cumulative(counts []atomic.Uint64) []uint64 {
	cum := make([]uint64, len(counts))
	var n uint64
	for i := range counts {
		n += counts[i].Load()
		cum[i] = n
	}
	return cum
}

// ExponentialBuckets returns n bounds: start, start*factor, ...
func ExponentialBuckets(start, factor float64, n int) []float64 {
	if n < 1 || start <= 0 || factor <= 1 {
		panic("metric: ExponentialBuckets needs n >= 1, start > 0, factor > 1")
	}
	b := make([]float64, n)
	for i := range b {
		b[i] = start
		start *= factor
	}
	return b
}
