package metrics

import (
	"fmt"
	"math"
	"slices"
	"sync/atomic"
)

// Histogram counts observations in fixed buckets. The zero value is not
// usable: NewHistogram or HistogramVec.WithLabelValues make one.
type Histogram struct {
	upper  []float64       // bucket upper bounds, ascending, without +Inf
	counts []atomic.Uint64 // per bucket, not cumulative; the last is +Inf
	count  atomic.Uint64
	sum    atomic.Uint64 // float64 bits
	desc   Desc
}

// HistogramOpts are Opts and the buckets' upper bounds.
type HistogramOpts struct {
	Name    string
	Help    string
	Buckets []float64 // ascending upper bounds; +Inf is implied
}

// NewHistogram returns a histogram without labels.
func NewHistogram(o HistogramOpts) *Histogram {
	checkNames(o.Name, nil)
	checkBuckets(o.Name, o.Buckets)
	return newHistogram(Desc{Name: o.Name, Help: o.Help, Type: HistogramType}, o.Buckets)
}

func newHistogram(d Desc, upper []float64) *Histogram {
	return &Histogram{desc: d, upper: upper, counts: make([]atomic.Uint64, len(upper)+1)}
}

func checkBuckets(name string, b []float64) {
	if len(b) == 0 || !slices.IsSorted(b) || slices.Contains(b, math.Inf(1)) {
		panic(fmt.Sprintf("metrics: %s: buckets must be ascending, finite and at least one", name))
	}
	for i := 1; i < len(b); i++ {
		if b[i] == b[i-1] {
			panic(fmt.Sprintf("metrics: %s: bucket %v twice", name, b[i]))
		}
	}
}

// Observe records v.
func (h *Histogram) Observe(v float64) {
	// Few buckets: a linear scan beats a binary search's branches.
	i := 0
	for i < len(h.upper) && v > h.upper[i] {
		i++
	}
	h.counts[i].Add(1)
	addFloat(&h.sum, v)
	h.count.Add(1)
}

// Count returns the number of observations.
func (h *Histogram) Count() uint64 { return h.count.Load() }

// Sum returns the sum of the observations.
func (h *Histogram) Sum() float64 { return math.Float64frombits(h.sum.Load()) }

func (h *Histogram) Describe() []Desc { return []Desc{h.desc} }

func (h *Histogram) Collect(w *Writer) { h.write(w, nil, nil) }

func (h *Histogram) write(w *Writer, names, values []string) {
	w.Histogram(h.desc.Name, names, values, h.upper, h.snapshot(), h.Sum())
}

// snapshot returns the cumulative bucket counts, +Inf last. A scrape that
// races observations may see a bucket ahead of the count by those; the
// +Inf bucket is the sum of the others, so the buckets stay monotonic.
func (h *Histogram) snapshot() []uint64 {
	cum := make([]uint64, len(h.counts))
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
		cum[i] = n
	}
	return cum
}
