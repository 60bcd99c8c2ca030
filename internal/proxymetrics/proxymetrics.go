// Package proxymetrics puts pkg/proxy's metric families on an
// internal/metrics registry: pkg/proxy takes a Registry of its own, in
// standard types, so code outside the module can give it one; this is
// the agent's.
package proxymetrics

import (
	"github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/pkg/proxy"
)

// Registry returns reg as a proxy.Registry.
func Registry(reg *metrics.Registry) proxy.Registry { return registry{reg} }

type registry struct{ reg *metrics.Registry }

func (r registry) Register(f proxy.Family) error { return r.reg.Register(collector{f}) }

// collector is one proxy.Family as an internal/metrics collector.
type collector struct{ f proxy.Family }

var types = map[proxy.MetricType]metrics.Type{
	proxy.CounterMetric:   metrics.CounterType,
	proxy.GaugeMetric:     metrics.GaugeType,
	proxy.HistogramMetric: metrics.HistogramType,
}

func (c collector) Describe() []metrics.Desc {
	return []metrics.Desc{{Name: c.f.Name, Help: c.f.Help, Type: types[c.f.Type]}}
}

func (c collector) Collect(w *metrics.Writer) {
	c.f.Collect(func(s proxy.Series) {
		if c.f.Type == proxy.HistogramMetric {
			w.Histogram(c.f.Name, c.f.Labels, s.LabelValues, c.f.Buckets, s.Counts, s.Sum)
			return
		}
		w.Sample(c.f.Name, "", c.f.Labels, s.LabelValues, s.Value)
	})
}
