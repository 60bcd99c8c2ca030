package kubesource

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// RegistryName is the nametable.Entry.Registry of every entry from this
// source.
const RegistryName = "Kubernetes"

// buildEntry turns one Service and the EndpointSlices labelled with its name
// into the entry svc.ns.svc.<domain>, following the Kubernetes DNS
// specification (github.com/kubernetes/dns, docs/specification.md):
//
//   - a service with ClusterIPs (ClusterIP, NodePort, LoadBalancer; v4, v6
//     or both) answers with those IPs and its named ports;
//   - a headless service (clusterIP None) answers with its ready endpoints,
//     each under its hostname when it has one (the EndpointSlice controller
//     sets it only for pods whose spec.subdomain names this service, which
//     is the spec's <hostname>.<subdomain> rule), otherwise under its dashed
//     IP; not-ready endpoints only with publishNotReadyAddresses;
//   - an ExternalName service is a CNAME to its target.
//
// ok is false for a service that has no DNS record yet (no ClusterIP
// allocated, an empty ExternalName).
//
// bad lists export-to annotation values that were ignored, for the log.
func buildEntry(svc *service, eps []*endpointSlice, domain string) (e registry.Entry, bad []string, ok bool) {
	e.Hostname = svc.name + "." + svc.namespace + ".svc." + domain
	e.Registry = RegistryName
	e.ShortName = svc.name
	e.Namespace = svc.namespace
	e.Namespaces, bad = parseExportTo(svc.exportTo, svc.namespace)

	switch svc.kind {
	case kindExternalName:
		if svc.externalName == "" {
			return e, bad, false
		}
		e.CanonicalName = svc.externalName
		return e, bad, true
	case kindHeadless:
		e.Endpoints = endpoints(eps, svc.publishNotReady)
		// The SRV records of a headless service point at the endpoints,
		// so the port is the endpoint's (target) port, which only the
		// slices know.
		e.Ports = slicePorts(eps)
		if len(e.Ports) == 0 {
			// No slice yet (or none with ports): the service's own ports
			// still give SRV names their port numbers.
			e.Ports = svc.ports
		}
		return e, bad, true
	default:
		if len(svc.clusterIPs) == 0 {
			return e, bad, false
		}
		// Shared with the cache: neither side modifies them.
		e.IPs = svc.clusterIPs
		e.Ports = svc.ports
		return e, bad, true
	}
}

// slicePorts returns the union of the slices' named ports.
func slicePorts(eps []*endpointSlice) []nametable.Port {
	switch len(eps) {
	case 0:
		return nil
	case 1:
		return eps[0].ports // already sorted; shared
	}
	var out []nametable.Port
	for _, s := range eps {
		out = append(out, s.ports...)
	}
	return sortPorts(out)
}

// endpoints returns one Endpoint per hostname (an IPv4 and an IPv6 slice
// of a dual-stack service both list the pod under the same hostname, and
// the pod should answer A and AAAA) and one per address for endpoints
// without a hostname, sorted.
func endpoints(eps []*endpointSlice, publishNotReady bool) []nametable.Endpoint {
	byHost := map[string]int{} // hostname -> index in out
	seen := map[netip.Addr]bool{}
	var out []nametable.Endpoint
	for _, s := range eps {
		for _, ep := range s.endpoints {
			if !ep.ready && !publishNotReady {
				continue
			}
			for _, a := range ep.addrs {
				if ep.hostname == "" {
					if seen[a] {
						continue
					}
					seen[a] = true
					zone, hints := ep.topo.parts()
					out = append(out, nametable.Endpoint{IPs: []netip.Addr{a}, Zone: zone, ForZones: hints})
					continue
				}
				i, ok := byHost[ep.hostname]
				if !ok {
					i = len(out)
					byHost[ep.hostname] = i
					zone, hints := ep.topo.parts()
					out = append(out, nametable.Endpoint{Hostname: ep.hostname, Zone: zone, ForZones: hints})
				}
				if !slices.Contains(out[i].IPs, a) {
					out[i].IPs = append(out[i].IPs, a)
				}
			}
		}
	}
	for i := range out {
		slices.SortFunc(out[i].IPs, netip.Addr.Compare)
	}
	slices.SortFunc(out, func(a, b nametable.Endpoint) int {
		return cmp.Or(strings.Compare(a.Hostname, b.Hostname), a.IPs[0].Compare(b.IPs[0]))
	})
	return out
}

// sameEntry reports whether two entries give the same answers, so an
// event that changes nothing DNS can see (a not-ready pod churning behind a
// ClusterIP service) sends no snapshot.
func sameEntry(a, b registry.Entry) bool {
	return a.Hostname == b.Hostname && a.ShortName == b.ShortName && a.Namespace == b.Namespace &&
		a.Registry == b.Registry && a.CanonicalName == b.CanonicalName && a.TTL == b.TTL &&
		slices.Equal(a.IPs, b.IPs) && slices.Equal(a.Ports, b.Ports) &&
		slices.Equal(a.AltHosts, b.AltHosts) && slices.Equal(a.Namespaces, b.Namespaces) &&
		slices.EqualFunc(a.Endpoints, b.Endpoints, func(x, y nametable.Endpoint) bool {
			return x.Hostname == y.Hostname && slices.Equal(x.IPs, y.IPs) &&
				x.Zone == y.Zone && slices.Equal(x.ForZones, y.ForZones)
		})
}
