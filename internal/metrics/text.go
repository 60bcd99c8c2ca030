package metrics

import (
	"math"
	"strconv"
	"strings"
)

// Writer gathers the samples of one scrape, by family, for the Registry to
// write in the text exposition format 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/).
type Writer struct {
	families map[string][]series
}

// series is the text of one series (several lines for a histogram or a
// summary) and the key it sorts by within its family.
type series struct {
	key  string
	text []byte
}

func (w *Writer) add(family, key string, text []byte) {
	if w.families == nil {
		w.families = map[string][]series{}
	}
	w.families[family] = append(w.families[family], series{key: key, text: text})
}

// Sample writes one sample line of family: the family's name plus suffix
// ("", "_sum", ...), labels from names and values paired by index.
func (w *Writer) Sample(family, suffix string, names, values []string, v float64) {
	b := appendSample(nil, family+suffix, names, values, "", "", v)
	w.add(family, labelKey(names, values), b)
}

// Histogram writes a histogram series: cumulative bucket counts (upper
// bounds upper, then +Inf), the sum and the count (the +Inf bucket's).
func (w *Writer) Histogram(family string, names, values []string, upper []float64, cum []uint64, sum float64) {
	var b []byte
	for i, n := range cum {
		le := "+Inf"
		if i < len(upper) {
			le = formatFloat(upper[i])
		}
		b = appendSample(b, family+"_bucket", names, values, "le", le, float64(n))
	}
	b = appendSample(b, family+"_sum", names, values, "", "", sum)
	b = appendSample(b, family+"_count", names, values, "", "", float64(cum[len(cum)-1]))
	w.add(family, labelKey(names, values), b)
}

// Summary writes a summary series: the quantiles (0 to 1, with their
// values), the sum and the count.
func (w *Writer) Summary(family string, quantiles, qvalues []float64, sum float64, count uint64) {
	var b []byte
	for i, q := range quantiles {
		b = appendSample(b, family, nil, nil, "quantile", formatFloat(q), qvalues[i])
	}
	b = appendSample(b, family+"_sum", nil, nil, "", "", sum)
	b = appendSample(b, family+"_count", nil, nil, "", "", float64(count))
	w.add(family, "", b)
}

// labelKey orders the series of a family by their label values, taken in
// label name order, so every scrape lists them alike.
func labelKey(names, values []string) string {
	var k strings.Builder
	for _, i := range sortedIndex(names) {
		k.WriteString(values[i])
		k.WriteByte(0xff)
	}
	return k.String()
}

// appendSample appends `name{l1="v1",...,extra="ev"} value\n`; labels come
// sorted by name, as Prometheus clients write them.
func appendSample(b []byte, name string, names, values []string, extra, extraValue string, v float64) []byte {
	b = append(b, name...)
	if len(names) > 0 || extra != "" {
		b = append(b, '{')
		for i, i0 := range sortedIndex(names) {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendLabel(b, names[i0], values[i0])
		}
		if extra != "" {
			if len(names) > 0 {
				b = append(b, ',')
			}
			b = appendLabel(b, extra, extraValue)
		}
		b = append(b, '}')
	}
	b = append(b, ' ')
	b = append(b, formatFloat(v)...)
	return append(b, '\n')
}

func appendLabel(b []byte, name, value string) []byte {
	b = append(b, name...)
	b = append(b, '=', '"')
	b = appendEscaped(b, value, true)
	return append(b, '"')
}

// sortedIndex returns the indexes of names in name order (label lists are
// a handful long: insertion sort, no allocation beyond the result).
func sortedIndex(names []string) []int {
	idx := make([]int, len(names))
	for i := range idx {
		idx[i] = i
		for j := i; j > 0 && names[idx[j]] < names[idx[j-1]]; j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
	return idx
}

// appendEscaped escapes per the text format: in label values backslash,
// double quote and line feed; in HELP text backslash and line feed.
func appendEscaped(b []byte, s string, quote bool) []byte {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			b = append(b, '\\', '\\')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '"' && quote:
			b = append(b, '\\', '"')
		default:
			b = append(b, c)
		}
	}
	return b
}

// formatFloat writes v as Prometheus clients do: the shortest
// representation that reads back exactly, +Inf, -Inf or NaN.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}
