package kubesource

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestEntrySet(t *testing.T) {
	type op struct {
		set    string // key to set (hostname = key)
		remove string // key to remove
		want   bool   // remove's result
	}
	tests := []struct {
		name string
		ops  []op
		want []string
	}{
		{name: "empty", want: []string{}},
		{name: "sets come out sorted", ops: []op{{set: "b/x"}, {set: "a/y"}, {set: "c/z"}, {set: "a/a"}}, want: []string{"a/a", "a/y", "b/x", "c/z"}},
		{name: "set twice keeps one", ops: []op{{set: "a/x"}, {set: "a/x"}}, want: []string{"a/x"}},
		{name: "remove present and absent", ops: []op{{set: "a/x"}, {set: "b/y"}, {remove: "a/x", want: true}, {remove: "a/x"}, {remove: "z/z"}}, want: []string{"b/y"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newEntrySet()
			for _, o := range tt.ops {
				if o.set != "" {
					s.set(o.set, kubeEntry("ns", o.set))
					continue
				}
				if got := s.remove(o.remove); got != o.want {
					t.Errorf("remove(%q) = %v, want %v", o.remove, got, o.want)
				}
			}
			got := []string{}
			for _, e := range s.snapshot() {
				got = append(got, e.ShortName)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("snapshot order (-want +got):\n%s", diff)
			}
			if s.len() != len(tt.want) {
				t.Errorf("len = %d, want %d", s.len(), len(tt.want))
			}
		})
	}
}
