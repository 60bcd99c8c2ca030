package metrics

import (
	"slices"
	"testing"
)

// Emit hands over the series a collector writes as values, labels and
// histogram counts included, and nothing of a summary.
func TestEmit(t *testing.T) {
	c := NewCounterVec(Opts{Name: "t_total", Help: "h"}, []string{"k"})
	c.WithLabelValues("a").Add(2)
	h := NewHistogram(HistogramOpts{Name: "t_seconds", Help: "h", Buckets: []float64{1, 2}})
	h.Observe(1.5)
	h.Observe(3)
	var samples []string
	var vals []float64
	Emit(c, Emitter{Sample: func(names, values []string, v float64) {
		samples = append(samples, names[0]+"="+values[0])
		vals = append(vals, v)
	}})
	if !slices.Equal(samples, []string{"k=a"}) || !slices.Equal(vals, []float64{2}) {
		t.Errorf("counter emitted %v %v, want [k=a] [2]", samples, vals)
	}
	var cum []uint64
	var sum float64
	Emit(h, Emitter{Histogram: func(_, _ []string, c []uint64, s float64) { cum, sum = slices.Clone(c), s }})
	if !slices.Equal(cum, []uint64{0, 1, 2}) || sum != 4.5 {
		t.Errorf("histogram emitted %v sum %v, want [0 1 2] sum 4.5", cum, sum)
	}
}
