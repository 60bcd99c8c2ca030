package proxy

import "github.com/meshdns/meshdns/pkg/metric"

// Registry receives a Handler's metrics (README.md, Metrics): the
// pkg/metric contract, shared with pkg/proxy/upstream, in standard types
// so any metrics library can stand behind it. NewHandler registers each
// family once. The agent hands over its internal/metrics registry through
// internal/proxymetrics.
type Registry = metric.Registry

// MetricType is the type of a metric family.
type MetricType = metric.Type

const (
	CounterMetric   = metric.CounterType
	GaugeMetric     = metric.GaugeType
	HistogramMetric = metric.HistogramType
)

// Family is one metric family.
type Family = metric.Family

// Series is one series of a Family.
type Series = metric.Series

// nopRegistry keeps nothing: the Registry of a Config that has none.
type nopRegistry = metric.Nop
