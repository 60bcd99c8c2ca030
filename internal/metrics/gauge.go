package metrics

import (
	"math"
	"sync/atomic"
)

// Gauge goes up and down. The zero value is not usable: NewGauge or
// GaugeVec.WithLabelValues make one.
type Gauge struct {
	bits atomic.Uint64 // float64 bits
	desc Desc
}

// NewGauge returns a gauge without labels.
func NewGauge(o Opts) *Gauge {
	checkNames(o.Name, nil)
	return &Gauge{desc: Desc{Name: o.Name, Help: o.Help, Type: GaugeType}}
}

func (g *Gauge) Set(v float64)  { g.bits.Store(math.Float64bits(v)) }
func (g *Gauge) Add(v float64)  { addFloat(&g.bits, v) }
func (g *Gauge) Inc()           { g.Add(1) }
func (g *Gauge) Dec()           { g.Add(-1) }
func (g *Gauge) Value() float64 { return math.Float64frombits(g.bits.Load()) }

func (g *Gauge) Describe() []Desc { return []Desc{g.desc} }

func (g *Gauge) Collect(w *Writer) { w.Sample(g.desc.Name, "", nil, nil, g.Value()) }

// GaugeFunc is a gauge whose value a function returns at each scrape.
type GaugeFunc struct {
	desc        Desc
	labelNames  []string
	labelValues []string
	f           func() float64
}

// NewGaugeFunc returns a gauge that calls f at each scrape; f must be safe
// for concurrent use.
func NewGaugeFunc(o Opts, f func() float64) *GaugeFunc {
	checkNames(o.Name, nil)
	return &GaugeFunc{desc: Desc{Name: o.Name, Help: o.Help, Type: GaugeType}, f: f}
}

// NewConstLabelGaugeFunc is NewGaugeFunc with fixed labels, for info
// metrics such as meshdns_build_info: names and values pair up by index.
func NewConstLabelGaugeFunc(o Opts, names, values []string, f func() float64) *GaugeFunc {
	checkNames(o.Name, names)
	if len(names) != len(values) {
		panic("metrics: " + o.Name + ": label names and values differ in number")
	}
	return &GaugeFunc{desc: Desc{Name: o.Name, Help: o.Help, Type: GaugeType}, labelNames: names, labelValues: values, f: f}
}

func (g *GaugeFunc) Value() float64 { return g.f() }

func (g *GaugeFunc) Describe() []Desc { return []Desc{g.desc} }

func (g *GaugeFunc) Collect(w *Writer) {
	w.Sample(g.desc.Name, "", g.labelNames, g.labelValues, g.f())
}
