// Package proxymetrics puts the metric families of pkg/proxy and
// pkg/proxy/upstream on an internal/metrics registry: those public
// packages take a pkg/metric Registry, in standard types, so code outside
// the module can give them one; this is the agent's.
package proxymetrics

import (
	"github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/pkg/metric"
)

// Registry returns reg as a metric.Registry (proxy.Registry is the same
// interface).
func Registry(reg *metrics.Registry) metric.Registry { return registry{reg} }

type registry struct{ reg *metrics.Registry }

func (r registry) Register(f metric.Family) error { return r.reg.Register(collector{f}) }

// collector is one metric.Family as an internal/metrics collector.
type collector struct{ f metric.Family }

var types = map[metric.Type]metrics.Type{
	metric.CounterType:   metrics.CounterType,
	metric.GaugeType:     metrics.GaugeType,
	metric.HistogramType: metrics.HistogramType,
}

func (c collector) Describe() []metrics.Desc {
	return []metrics.Desc{{Name: c.f.Name, Help: c.f.Help, Type: types[c.f.Type]}}
}

func (c collector) Collect(w *metrics.Writer) {
	c.f.Collect(func(s metric.Series) {
		if c.f.Type == metric.HistogramType {
			w.Histogram(c.f.Name, c.f.Labels, s.LabelValues, c.f.Buckets, s.Counts, s.Sum)
			return
		}
		w.Sample(c.f.Name, "", c.f.Labels, s.LabelValues, s.Value)
	})
}
