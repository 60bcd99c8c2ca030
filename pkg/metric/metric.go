// Package metric is how meshdns's public packages (pkg/proxy, its
// observer and pkg/proxy/upstream) count, and the contract through which
// their counts reach a registry. The series they count with (Counter,
// Gauge, Histogram, Pow2Histogram, and the labelled CounterVec and
// HistogramVec) update with atomic adds and allocate nothing; a Family
// reads them on every scrape. The contract is in standard types, so any
// metrics library can stand behind it and code outside the module can give
// those packages a registry. It sits below them all, so they share one way
// of counting without an import cycle.
package metric

// Registry receives metric families: a package registers each family
// once, and the registry reads the family's series through Collect on
// every scrape. The agent hands over its internal/metrics registry
// through internal/proxymetrics.
type Registry interface {
	// Register adds f. An error (a name already taken) fails the
	// constructor that registers it.
	Register(f Family) error
}

// Type is the type of a metric family.
type Type uint8

const (
	CounterType Type = iota
	GaugeType
	HistogramType
)

// Family is one metric family.
type Family struct {
	Name string // meshdns_<subsystem>_...
	Help string
	Type Type
	// Labels are the label names, in the order of Series.LabelValues.
	Labels []string
	// Buckets are the upper bounds of a histogram's buckets, ascending;
	// +Inf is implied.
	Buckets []float64
	// Collect calls emit once per series with its current values; the
	// Series and its slices are valid only during the call. A labelled
	// family emits only the series used so far, as Prometheus clients do.
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

// Nop keeps nothing: the registry of a Config that has none.
type Nop struct{}

func (Nop) Register(Family) error { return nil }
