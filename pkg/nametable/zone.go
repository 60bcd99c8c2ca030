package nametable

import (
	"slices"

	"github.com/miekg/dns"
)

// A per-pod table knows the pod's zone (Context.Zone), which a central
// DNS server can only guess from the client's address: a headless
// service's A and AAAA sets list the endpoints in that zone first, and
// Result.Local says how many they are, so that the server rotates them
// among themselves and sends the others after them in their order. The
// order is fixed when the table is built, so a lookup costs nothing more;
// a new pod zone means a new table.

// LocalZone is the pod's zone the table orders answers by (Context.Zone).
func (t *Table) LocalZone() string {
	if t == nil {
		return ""
	}
	return t.pod.Zone
}

// inPodZone reports whether ep serves the pod's zone: its EndpointSlice
// hints name the zone when it has hints (topology-aware routing puts them
// on every endpoint of a slice), else it is in the zone. Never for an
// unknown pod zone.
func inPodZone(ep *Endpoint, zone string) bool {
	if zone == "" {
		return false
	}
	if len(ep.ForZones) > 0 {
		return slices.Contains(ep.ForZones, zone)
	}
	return ep.Zone == zone
}

// localFirst moves the names in the pod's zone before the others, each
// group in its order (a stable partition). Names all in or all out of the
// zone are left as they are, unmarked: they are one group.
func localFirst(eps []endpointName) []endpointName {
	n := 0
	for i := range eps {
		if eps[i].local {
			n++
		}
	}
	if n == 0 || n == len(eps) {
		for i := range eps {
			eps[i].local = false
		}
		return eps
	}
	out := make([]endpointName, 0, len(eps))
	for _, local := range []bool{true, false} {
		for _, ep := range eps {
			if ep.local == local {
				out = append(out, ep)
			}
		}
	}
	return out
}

// local is Result.Local of answer, records of the zoned node n.
func (t *Table) local(n *node, answer []dns.RR) int {
	if len(answer) == 0 {
		return 0
	}
	sh := t.shapeOf(n)
	switch answer[0].Header().Rrtype {
	case dns.TypeA:
		return int(sh.local[0])
	case dns.TypeAAAA:
		return int(sh.local[1])
	}
	return 0
}
