package metric

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// vec holds the series of a labelled family whose label values are known
// only at run time (an upstream's address), created on first use.
type vec[T any] struct {
	labels []string
	newT   func() *T
	series func(t *T, labelValues []string) Series

	mu       sync.Mutex    // guards following
	byValues map[string]*T // by the label values joined with \xff
	children []child[T]    // in the order of creation; append only
}

type child[T any] struct {
	values []string
	t      *T
}

func newVec[T any](labels []string, newT func() *T, series func(*T, []string) Series) vec[T] {
	return vec[T]{labels: labels, newT: newT, series: series, byValues: map[string]*T{}}
}

// with returns the series of values, creating it on first use. It locks
// and allocates: callers resolve their series once, outside the hot path,
// and keep them.
func (v *vec[T]) with(values []string) *T {
	if len(values) != len(v.labels) {
		panic(fmt.Sprintf("metric: labels %v, got %d values", v.labels, len(values)))
	}
	key := strings.Join(values, "\xff")
	v.mu.Lock()
	defer v.mu.Unlock()
	if t, ok := v.byValues[key]; ok {
		return t
	}
	t := v.newT()
	v.byValues[key] = t
	v.children = append(v.children, child[T]{values: slices.Clone(values), t: t})
	return t
}

// Collect emits every series created so far, counted or not.
func (v *vec[T]) Collect(emit func(Series)) {
	v.mu.Lock()
	cs := v.children // append only: what is there stays as it is
	v.mu.Unlock()
	for _, c := range cs {
		emit(v.series(c.t, c.values))
	}
}

// CounterVec is a counter family with labels whose values are known only
// at run time. NewCounterVec makes one.
type CounterVec struct{ vec[Counter] }

// NewCounterVec returns a counter family with the label names labels (the
// Family's Labels).
func NewCounterVec(labels []string) *CounterVec {
	return &CounterVec{newVec(labels, func() *Counter { return new(Counter) },
		func(c *Counter, values []string) Series { return Series{LabelValues: values, Value: float64(c.Load())} })}
}

// With returns the counter of these label values (in the order of the
// label names), creating it, at 0, on first use; Collect emits it from
// then on.
func (v *CounterVec) With(values ...string) *Counter { return v.with(values) }

// HistogramVec is a Histogram family with labels whose values are known
// only at run time. NewHistogramVec makes one.
type HistogramVec struct{ vec[Histogram] }

// NewHistogramVec returns a histogram family with the label names labels
// and the bucket bounds upper (the Family's Labels and Buckets).
func NewHistogramVec(labels []string, upper []float64) *HistogramVec {
	checkBuckets(upper)
	return &HistogramVec{newVec(labels, func() *Histogram { return NewHistogram(upper) },
		func(h *Histogram, values []string) Series { return h.Series(values...) })}
}

// With returns the histogram of these label values, creating it on first
// use; Collect emits it from then on.
func (v *HistogramVec) With(values ...string) *Histogram { return v.with(values) }
