package metric

import "sync/atomic"

// Counter is a series that only goes up. The zero value is ready: a
// family of series can be an array indexed by small enums, and counting is
// one atomic add that allocates nothing.
type Counter struct{ n atomic.Uint64 }

// Inc adds 1.
func (c *Counter) Inc() { c.n.Add(1) }

// Add adds n.
func (c *Counter) Add(n uint64) { c.n.Add(n) }

// Load returns the count.
func (c *Counter) Load() uint64 { return c.n.Load() }

// Collect emits c as the one series of a family without labels.
func (c *Counter) Collect(emit func(Series)) { emit(Series{Value: float64(c.n.Load())}) }

// Gauge is a series that goes up and down by whole numbers (connections,
// queries in flight). The zero value is ready.
type Gauge struct{ n atomic.Int64 }

// Add adds d, which may be negative.
func (g *Gauge) Add(d int64) { g.n.Add(d) }

func (g *Gauge) Inc() { g.n.Add(1) }
func (g *Gauge) Dec() { g.n.Add(-1) }

// Load returns the value.
func (g *Gauge) Load() int64 { return g.n.Load() }

// Collect emits g as the one series of a family without labels.
func (g *Gauge) Collect(emit func(Series)) { emit(Series{Value: float64(g.n.Load())}) }
