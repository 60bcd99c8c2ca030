package metrics

import (
	"math"
	"sync/atomic"
)

// Counter only goes up. The zero value is not usable: NewCounter or
// CounterVec.WithLabelValues make one.
type Counter struct {
	n    atomic.Uint64 // whole increments: one atomic add each
	frac atomic.Uint64 // float64 bits of what Add added beyond whole numbers
	desc Desc
}

// NewCounter returns a counter without labels.
func NewCounter(o Opts) *Counter {
	checkNames(o.Name, nil)
	return &Counter{desc: Desc{Name: o.Name, Help: o.Help, Type: CounterType}}
}

// Inc adds 1.
func (c *Counter) Inc() { c.n.Add(1) }

// Add adds v, which must not be negative (a counter never goes down).
func (c *Counter) Add(v float64) {
	if v < 0 {
		panic("metrics: counter cannot decrease")
	}
	if w := math.Trunc(v); w == v && v < 1<<53 {
		c.n.Add(uint64(w))
		return
	}
	addFloat(&c.frac, v)
}

// Value returns the count.
func (c *Counter) Value() float64 {
	return float64(c.n.Load()) + math.Float64frombits(c.frac.Load())
}

func (c *Counter) Describe() []Desc { return []Desc{c.desc} }

func (c *Counter) Collect(w *Writer) { w.Sample(c.desc.Name, "", nil, nil, c.Value()) }

// addFloat adds v to the float64 whose bits p holds.
func addFloat(p *atomic.Uint64, v float64) {
	for {
		old := p.Load()
		if p.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}
