package metrics

import (
	"fmt"
	"slices"
	"strings"
	"sync"
)

// vec holds the series of one labelled family, created on first use.
type vec[T any] struct {
	desc   Desc
	labels []string
	newT   func() *T
	write  func(w *Writer, t *T, values []string)

	mu       sync.Mutex           // guards following
	children map[string]*child[T] // by the label values joined with \xff
}

type child[T any] struct {
	values []string
	t      *T
}

func newVec[T any](d Desc, labels []string, newT func() *T, write func(*Writer, *T, []string)) *vec[T] {
	checkNames(d.Name, labels)
	return &vec[T]{desc: d, labels: slices.Clone(labels), newT: newT, write: write, children: map[string]*child[T]{}}
}

// with returns the series for values, creating it on first use. It locks
// and allocates: resolve series once, outside the hot path.
func (v *vec[T]) with(values []string) *T {
	if len(values) != len(v.labels) {
		panic(fmt.Sprintf("metrics: %s has labels %v, got %d values", v.desc.Name, v.labels, len(values)))
	}
	key := strings.Join(values, "\xff")
	v.mu.Lock()
	defer v.mu.Unlock()
	if c, ok := v.children[key]; ok {
		return c.t
	}
	c := &child[T]{values: slices.Clone(values), t: v.newT()}
	v.children[key] = c
	return c.t
}

// remove drops the series of values and reports whether there was one.
func (v *vec[T]) remove(values []string) bool {
	key := strings.Join(values, "\xff")
	v.mu.Lock()
	defer v.mu.Unlock()
	_, ok := v.children[key]
	delete(v.children, key)
	return ok
}

func (v *vec[T]) reset() {
	v.mu.Lock()
	clear(v.children)
	v.mu.Unlock()
}

func (v *vec[T]) Describe() []Desc { return []Desc{v.desc} }

func (v *vec[T]) Collect(w *Writer) {
	v.mu.Lock()
	cs := make([]*child[T], 0, len(v.children))
	for _, c := range v.children {
		cs = append(cs, c)
	}
	v.mu.Unlock()
	for _, c := range cs {
		v.write(w, c.t, c.values)
	}
}

// CounterVec is a counter family with labels.
type CounterVec struct{ *vec[Counter] }

// NewCounterVec returns a counter family with the given label names.
func NewCounterVec(o Opts, labels []string) *CounterVec {
	d := Desc{Name: o.Name, Help: o.Help, Type: CounterType}
	return &CounterVec{newVec(d, labels, func() *Counter { return &Counter{desc: d} },
		func(w *Writer, c *Counter, values []string) { w.Sample(d.Name, "", labels, values, c.Value()) })}
}

// WithLabelValues returns the counter of these label values (in the order
// of the label names), creating it, at 0, on first use.
func (v *CounterVec) WithLabelValues(values ...string) *Counter { return v.with(values) }

// GaugeVec is a gauge family with labels.
type GaugeVec struct{ *vec[Gauge] }

// NewGaugeVec returns a gauge family with the given label names.
func NewGaugeVec(o Opts, labels []string) *GaugeVec {
	d := Desc{Name: o.Name, Help: o.Help, Type: GaugeType}
	return &GaugeVec{newVec(d, labels, func() *Gauge { return &Gauge{desc: d} },
		func(w *Writer, g *Gauge, values []string) { w.Sample(d.Name, "", labels, values, g.Value()) })}
}

// WithLabelValues returns the gauge of these label values, creating it on
// first use.
func (v *GaugeVec) WithLabelValues(values ...string) *Gauge { return v.with(values) }

// Reset drops every series (an info metric moving to new label values).
func (v *GaugeVec) Reset() { v.reset() }

// DeleteLabelValues drops the series of these label values and reports
// whether it existed.
func (v *GaugeVec) DeleteLabelValues(values ...string) bool { return v.remove(values) }

// HistogramVec is a histogram family with labels.
type HistogramVec struct{ *vec[Histogram] }

// NewHistogramVec returns a histogram family with the given label names.
func NewHistogramVec(o HistogramOpts, labels []string) *HistogramVec {
	checkBuckets(o.Name, o.Buckets)
	d := Desc{Name: o.Name, Help: o.Help, Type: HistogramType}
	upper := slices.Clone(o.Buckets)
	return &HistogramVec{newVec(d, labels, func() *Histogram { return newHistogram(d, upper) },
		func(w *Writer, h *Histogram, values []string) { h.write(w, labels, values) })}
}

// WithLabelValues returns the histogram of these label values, creating
// it on first use.
func (v *HistogramVec) WithLabelValues(values ...string) *Histogram { return v.with(values) }
