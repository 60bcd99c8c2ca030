// Package metrics is the agent's own small Prometheus client: counters,
// gauges and histograms whose label values are resolved once, outside the
// query path, and a Registry that writes the Prometheus text exposition
// format 0.0.4. Every pod runs an agent and every agent has nearly all of
// its binary's pages resident, so the agent does without client_golang
// (and the protobuf data model it carries); the control plane keeps it.
//
// Updates are lock-free: a counter increment is one atomic add and
// allocates nothing. Creating a series (WithLabelValues) locks and
// allocates, so callers resolve their series once and keep them.
package metrics

import "fmt"

// Type is a metric family's type, as the TYPE line names it.
type Type uint8

const (
	CounterType Type = iota
	GaugeType
	HistogramType
	SummaryType
)

func (t Type) String() string {
	switch t {
	case CounterType:
		return "counter"
	case GaugeType:
		return "gauge"
	case HistogramType:
		return "histogram"
	case SummaryType:
		return "summary"
	}
	return "untyped"
}

// Desc describes one metric family.
type Desc struct {
	Name string
	Help string
	Type Type
}

// Collector is anything a Registry can hold: one or more families, written
// on every scrape.
type Collector interface {
	// Describe lists the families the collector writes; it never changes.
	Describe() []Desc
	// Collect writes the current samples of those families to w.
	Collect(w *Writer)
}

// Opts name and explain a metric.
type Opts struct {
	Name string // meshdns_<subsystem>_<name>_<unit>
	Help string
}

// checkNames panics on a metric or label name the text format cannot
// carry: they are constants of the program, so a bad one is a bug.
func checkNames(name string, labels []string) {
	if !validName(name, true) {
		panic(fmt.Sprintf("metrics: invalid metric name %q", name))
	}
	for _, l := range labels {
		if !validName(l, false) || l == "le" || l == "quantile" {
			panic(fmt.Sprintf("metrics: invalid label name %q of %s", l, name))
		}
	}
}

// validName reports whether s matches [a-zA-Z_:][a-zA-Z0-9_:]* (metric
// names) or, without colons, [a-zA-Z_][a-zA-Z0-9_]* (label names).
func validName(s string, colon bool) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || colon && c == ':' || i > 0 && c >= '0' && c <= '9'
		if !ok {
			return false
		}
	}
	return true
}
