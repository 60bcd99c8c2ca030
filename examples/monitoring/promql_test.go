package monitoring_test

import (
	"testing"

	"fmt"
	"slices"
	"strings"
	"unicode"

	"github.com/google/go-cmp/cmp"
)

// selector is one metric an expression reads, with the label names its
// matchers use ({rcode="SERVFAIL"}: rcode).
type selector struct {
	metric string
	labels []string
}

// exprRefs lists what a PromQL expression (as written in the rules and the
// dashboard, Grafana's $variables included) reads: the metrics it selects
// with their matchers' label names, and the label names of its by, without,
// on, ignoring and group_ clauses. It is a scanner, not a parser: enough to
// tell metric names from functions, keywords, labels, strings, numbers and
// durations in the expressions this directory ships, and it fails on
// anything it does not expect rather than guessing.
func exprRefs(expr string) (sels []selector, grouping []string, err error) {
	s := []rune(expr)
	i := 0
	ident := func() string {
		j := i
		for i < len(s) && (s[i] == '_' || s[i] == ':' || unicode.IsLetter(s[i]) || unicode.IsDigit(s[i])) {
			i++
		}
		return string(s[j:i])
	}
	skipSpace := func() {
		for i < len(s) && unicode.IsSpace(s[i]) {
			i++
		}
	}
	// skipString moves past the string literal opening at i.
	skipString := func() error {
		q := s[i]
		for i++; i < len(s); i++ {
			if s[i] == '\\' && q != '`' {
				i++
				continue
			}
			if s[i] == q {
				i++
				return nil
			}
		}
		return fmt.Errorf("unterminated string in %q", expr)
	}
	// labelList reads "(a, b)" at i.
	labelList := func() ([]string, error) {
		skipSpace()
		if i >= len(s) || s[i] != '(' {
			return nil, fmt.Errorf("want ( at %d of %q", i, expr)
		}
		i++
		var out []string
		for {
			skipSpace()
			if i < len(s) && s[i] == ')' {
				i++
				return out, nil
			}
			if i < len(s) && s[i] == ',' {
				i++
				continue
			}
			l := ident()
			if l == "" {
				return nil, fmt.Errorf("want a label name at %d of %q", i, expr)
			}
			out = append(out, l)
		}
	}
	// matchers reads "{a="x", b=~"y"}" at i and returns the label names.
	matchers := func() ([]string, error) {
		i++ // {
		var out []string
		for {
			skipSpace()
			switch {
			case i >= len(s):
				return nil, fmt.Errorf("unterminated matchers in %q", expr)
			case s[i] == '}':
				i++
				return out, nil
			case s[i] == ',':
				i++
				continue
			}
			l := ident()
			if l == "" {
				return nil, fmt.Errorf("want a label name at %d of %q", i, expr)
			}
			out = append(out, l)
			skipSpace()
			for i < len(s) && strings.ContainsRune("=!~", s[i]) {
				i++
			}
			skipSpace()
			if i >= len(s) || !strings.ContainsRune("\"'`", s[i]) {
				return nil, fmt.Errorf("want a string after label %s in %q", l, expr)
			}
			if err := skipString(); err != nil {
				return nil, err
			}
		}
	}
	for i < len(s) {
		c := s[i]
		switch {
		case unicode.IsSpace(c) || strings.ContainsRune("()+-*/%^<>=!,", c):
			i++
		case c == '"' || c == '\'' || c == '`':
			if err := skipString(); err != nil {
				return nil, nil, err
			}
		case c == '[': // a range or subquery: durations and Grafana variables only
			for i < len(s) && s[i] != ']' {
				i++
			}
			i++
		case c == '$': // a Grafana variable outside a string: $__rate_interval
			i++
			ident()
		case unicode.IsDigit(c) || c == '.':
			for i < len(s) && (unicode.IsDigit(s[i]) || unicode.IsLetter(s[i]) || s[i] == '.') {
				i++
			}
		case c == '{':
			ls, err := matchers()
			if err != nil {
				return nil, nil, err
			}
			if len(sels) == 0 {
				return nil, nil, fmt.Errorf("matchers without a metric name in %q", expr)
			}
			// Matchers directly follow their metric name; anything else
			// between them was rejected when the name was read.
			sels[len(sels)-1].labels = append(sels[len(sels)-1].labels, ls...)
		case c == '_' || c == ':' || unicode.IsLetter(c):
			name := ident()
			skipSpace()
			next := rune(0)
			if i < len(s) {
				next = s[i]
			}
			switch {
			case slices.Contains(groupingKeywords, name):
				if next != '(' { // group_left without labels
					continue
				}
				ls, err := labelList()
				if err != nil {
					return nil, nil, err
				}
				grouping = append(grouping, ls...)
			case slices.Contains(keywords, name):
			case slices.Contains(functions, name):
				// an aggregation may put its by clause before the (
			case next == '(':
				if !slices.Contains(functions, name) {
					return nil, nil, fmt.Errorf("unknown function %s in %q", name, expr)
				}
			default:
				sels = append(sels, selector{metric: name})
			}
		default:
			return nil, nil, fmt.Errorf("unexpected %q at %d of %q", c, i, expr)
		}
	}
	return sels, grouping, nil
}

var (
	groupingKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}
	keywords         = []string{"and", "or", "unless", "bool", "offset", "inf", "nan"}
	// functions the shipped expressions may call; one not listed fails the
	// scan, so a typo in a metric name followed by ( cannot pass as one.
	functions = []string{
		"sum", "min", "max", "avg", "count", "topk", "bottomk", "quantile",
		"rate", "irate", "increase", "delta", "deriv", "histogram_quantile",
		"time", "vector", "scalar", "abs", "clamp_min", "clamp_max", "absent",
		"max_over_time", "min_over_time", "avg_over_time", "label_values",
	}
)

func TestExprRefs(t *testing.T) {
	tests := []struct {
		name     string
		expr     string
		sels     []selector
		grouping []string
		err      bool
	}{
		{name: "bare", expr: "meshdns_agent_ready == 0", sels: []selector{{metric: "meshdns_agent_ready"}}},
		{
			name: "matchers, strings and ranges",
			expr: `sum by (namespace) (rate(m_total{source="upstream", rcode=~"SERVFAIL|x}"}[5m])) / 0.05e1`,
			sels: []selector{{metric: "m_total", labels: []string{"source", "rcode"}}}, grouping: []string{"namespace"},
		},
		{
			name: "aggregation clause after the call, binary matching",
			expr: `sum(rate(a_bucket[$__rate_interval])) without (pod) and on (namespace, pod) b == bool 1`,
			sels: []selector{{metric: "a_bucket"}, {metric: "b"}}, grouping: []string{"pod", "namespace", "pod"},
		},
		{name: "time and vector are functions", expr: "min(x) - time() < 7 * 86400 or vector(0)", sels: []selector{{metric: "x"}}},
		{name: "unknown function", expr: "sum(rte(x[5m]))", err: true},
		{name: "unterminated string", expr: `x{a="b}`, err: true},
		{name: "matchers without a name", expr: `{a="b"}`, err: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sels, grouping, err := exprRefs(tt.expr)
			if tt.err {
				if err == nil {
					t.Fatalf("exprRefs(%q) = %v, %v, want an error", tt.expr, sels, grouping)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.sels, sels, cmp.AllowUnexported(selector{})); diff != "" {
				t.Errorf("selectors (-want +got)\n%s", diff)
			}
			if diff := cmp.Diff(tt.grouping, grouping); diff != "" {
				t.Errorf("grouping (-want +got)\n%s", diff)
			}
		})
	}
}
