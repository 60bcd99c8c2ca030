package metrics

// Emitter receives the series a Collector writes as values instead of
// text: how collectors of a public package reach a registry that is not
// this package's (pkg/metric's contract).
type Emitter struct {
	// Sample receives each counter or gauge series.
	Sample func(names, values []string, v float64)
	// Histogram receives each histogram series: cumulative bucket counts,
	// then +Inf, and the sum.
	Histogram func(names, values []string, cum []uint64, sum float64)
}

// Emit calls e once per series of c. Summaries are not emitted.
func Emit(c Collector, e Emitter) { c.Collect(&Writer{emit: &e}) }
