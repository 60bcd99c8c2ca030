package kubesource

import (
	"strings"
	"unique"

	discoveryv1 "k8s.io/api/discovery/v1"
)

// topology is where an endpoint serves: its zone and the zones its
// EndpointSlice hints name, joined by spaces (zone names are label
// values: they hold none).
type topology struct{ zone, forZones string }

// topo is an endpoint's topology, interned: every endpoint of a zone (and
// hints) shares one, and the cache holds 8 bytes per endpoint instead of
// a string and a slice. The zero topo is none.
type topo struct{ h unique.Handle[topology] }

func newTopo(zone *string, hints *discoveryv1.EndpointHints) topo {
	var t topology
	if zone != nil {
		t.zone = *zone
	}
	if hints != nil {
		names := make([]string, 0, len(hints.ForZones))
		for _, z := range hints.ForZones {
			if z.Name != "" && !strings.Contains(z.Name, " ") {
				names = append(names, z.Name)
			}
		}
		t.forZones = strings.Join(names, " ")
	}
	if t == (topology{}) {
		return topo{}
	}
	return topo{unique.Make(t)}
}

// parts returns the zone and the hints' zones (nil without hints).
func (t topo) parts() (zone string, forZones []string) {
	if t == (topo{}) {
		return "", nil
	}
	v := t.h.Value()
	if v.forZones != "" {
		forZones = strings.Split(v.forZones, " ")
	}
	return v.zone, forZones
}
