package kubesource

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	discoveryv1 "k8s.io/api/discovery/v1"
)

func TestTopo(t *testing.T) {
	hints := func(zones ...string) *discoveryv1.EndpointHints {
		h := &discoveryv1.EndpointHints{}
		for _, z := range zones {
			h.ForZones = append(h.ForZones, discoveryv1.ForZone{Name: z})
		}
		return h
	}
	tests := []struct {
		name      string
		zone      *string
		hints     *discoveryv1.EndpointHints
		wantZone  string
		wantHints []string
	}{
		{name: "none"},
		{name: "zone only", zone: ptr("a"), wantZone: "a"},
		{name: "hints only", hints: hints("a", "b"), wantHints: []string{"a", "b"}},
		{name: "both", zone: ptr("a"), hints: hints("b"), wantZone: "a", wantHints: []string{"b"}},
		{name: "empty hints are none", zone: ptr("a"), hints: hints(), wantZone: "a"},
		{name: "names the API would refuse are dropped", hints: hints("", "x y", "c"), wantHints: []string{"c"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tp := newTopo(tt.zone, tt.hints)
			zone, got := tp.parts()
			if zone != tt.wantZone || !cmp.Equal(tt.wantHints, got) {
				t.Errorf("parts = %q, %q; want %q, %q", zone, got, tt.wantZone, tt.wantHints)
			}
			if tp != newTopo(tt.zone, tt.hints) {
				t.Errorf("the same topology twice is two values")
			}
		})
	}
}
