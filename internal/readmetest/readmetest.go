// Package readmetest checks that a package README documents what the
// package registers. Every package with metrics has the same test (the
// README's Metrics section lists exactly what is registered, see
// docs/design.md); this is the one implementation they share. Its own
// test checks that every package README opens with what the package is
// for and what it may import.
package readmetest

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/internal/metrics"
)

// MetricName matches a metric name opening a code span: `meshdns_x_total`
// and `meshdns_x_total{label}` both document meshdns_x_total.
var MetricName = regexp.MustCompile("`(meshdns_[a-z0-9_]+)")

// DocumentedMetrics returns the sorted, distinct metric names that pattern
// (first group: the name) finds in the "## Metrics" section, up to the next
// "## " heading, of the README at path. Packages whose README also points
// at other packages' metrics pass a pattern for their own names or layout.
func DocumentedMetrics(t testing.TB, path string, pattern *regexp.Regexp) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## Metrics\n")
	if !ok {
		t.Fatalf("%s has no Metrics section", path)
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var names []string
	for _, m := range pattern.FindAllStringSubmatch(section, -1) {
		names = append(names, m[1])
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// MetricsDocumented fails t unless the README at path documents exactly the
// registered metric names (in any order, duplicates ignored), as found by
// pattern (see DocumentedMetrics).
func MetricsDocumented(t testing.TB, path string, pattern *regexp.Regexp, registered []string) {
	t.Helper()
	reg := slices.Compact(slices.Sorted(slices.Values(registered)))
	if diff := cmp.Diff(reg, DocumentedMetrics(t, path, pattern)); diff != "" {
		t.Errorf("%s Metrics section (-registered +documented):\n%s", path, diff)
	}
}

// Registered returns the family names registered on reg (those of the
// agent's own metrics package), whether or not they have series yet: a
// labelled family none of whose label values was used is still
// registered, and documented.
func Registered(reg *metrics.Registry) []string { return reg.Names() }

// CheckNames fails t for every family of reg whose name breaks the naming
// rules of docs/design.md: a meshdns_ prefix, counters and only counters
// ending in _total, histograms in a base unit: _seconds (durations) or
// _bytes (sizes).
func CheckNames(t testing.TB, reg *metrics.Registry) {
	t.Helper()
	for _, d := range reg.Descs() {
		if !strings.HasPrefix(d.Name, "meshdns_") {
			t.Errorf("metric %s lacks the meshdns_ prefix", d.Name)
		}
		if (d.Type == metrics.CounterType) != strings.HasSuffix(d.Name, "_total") {
			t.Errorf("metric %s (%s): counters, and only counters, end in _total", d.Name, d.Type)
		}
		if d.Type == metrics.HistogramType && !strings.HasSuffix(d.Name, "_seconds") && !strings.HasSuffix(d.Name, "_bytes") {
			t.Errorf("metric %s: histograms end in _seconds or _bytes", d.Name)
		}
	}
}
