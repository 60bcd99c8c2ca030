package kubesource

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"k8s.io/apimachinery/pkg/util/validation"
)

func TestParseExportTo(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    []string
		wantBad []string
	}{
		{name: "absent means everyone", value: "", want: nil},
		{name: "blank means everyone", value: "  ", want: nil},
		{name: "list includes own namespace, sorted", value: "b,a", want: []string{"a", "b", "own"}},
		{name: "dot is own namespace", value: ".", want: []string{"own"}},
		{name: "star anywhere means everyone", value: "a,*", want: nil},
		{name: "spaces and empty items", value: " a , ,b ", want: []string{"a", "b", "own"}},
		{name: "repeats collapse", value: "a,a,own", want: []string{"a", "own"}},
		{name: "invalid names are ignored", value: "a,Bad_NS,-x", want: []string{"a", "own"}, wantBad: []string{"Bad_NS", "-x"}},
		{name: "only invalid names fail closed", value: "NOPE", want: []string{"own"}, wantBad: []string{"NOPE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, bad := parseExportTo(tt.value, "own")
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("namespaces (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantBad, bad, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("bad (-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzParseExportTo checks the parser's invariants on any annotation
// value: nil (everyone) or a sorted, repeat-free list of valid namespace
// names that includes the own namespace.
func FuzzParseExportTo(f *testing.F) {
	f.Add("a,b")      // plain list
	f.Add(".")        // own namespace
	f.Add("*")        // everyone
	f.Add(" , ,")     // only separators
	f.Add("A,b_c,-d") // invalid names
	f.Add("ns,ns")    // repeats
	f.Fuzz(func(t *testing.T, v string) {
		got, bad := parseExportTo(v, "own")
		if got == nil {
			return
		}
		if !slices.Contains(got, "own") {
			t.Fatalf("%q: own namespace missing from %q", v, got)
		}
		if !slices.IsSorted(got) || len(slices.Compact(slices.Clone(got))) != len(got) {
			t.Fatalf("%q: not sorted and unique: %q", v, got)
		}
		for _, ns := range got {
			if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
				t.Fatalf("%q: invalid namespace %q in result", v, ns)
			}
		}
		for _, b := range bad {
			if !strings.Contains(v, b) {
				t.Fatalf("%q: bad value %q not in the input", v, b)
			}
		}
	})
}
