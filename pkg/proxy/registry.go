package proxy

// Registry receives a Handler's metrics (README.md, Metrics). It is this
// package's own contract, in standard types, so any metrics library can
// stand behind it: NewHandler registers each family once, and the
// registry reads the family's series through Collect on every scrape.
// The agent hands over its internal/metrics registry through
// internal/proxymetrics.
type Registry interface {
	// Register adds f. An error (a name already taken) fails NewHandler.
	Register(f Family) error
}

// MetricType is the type of a metric family.
type MetricType uint8

const (
	CounterMetric MetricType = iota
	GaugeMetric
	HistogramMetric
)

// Family is one metric family.
type Family struct {
	Name string // meshdns_dns_...
	Help string
	Type MetricType
	// Labels are the label names, in the order of Series.LabelValues.
	Labels []string
	// Buckets are the upper bounds of a histogram's buckets, ascending;
	// +Inf is implied.
	Buckets []float64
	// Collect calls emit once per series with its current values; the
	// Series and its slices are valid only during the call. A labelled
	// family emits only the series used so far (none before the first
	// query), as Prometheus clients do.
	Collect func(emit func(Series))
}

// Series is one series of a Family.
type Series struct {
	LabelValues []string
	// Value of a counter or a gauge.
	Value float64
	// Counts of a histogram: cumulative per bucket of Family.Buckets, then
	// +Inf (the count of observations); Sum their sum.
	Counts []uint64
	Sum    float64
}

// nopRegistry keeps nothing: the Registry of a Config that has none.
type nopRegistry struct{}

func (nopRegistry) Register(Family) error { return nil }
