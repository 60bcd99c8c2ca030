package kubesource

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

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
func buildEntry(svc *corev1.Service, eps []*discoveryv1.EndpointSlice, domain string) (e registry.Entry, bad []string, ok bool) {
	e.Hostname = svc.Name + "." + svc.Namespace + ".svc." + domain
	e.Registry = RegistryName
	e.ShortName = svc.Name
	e.Namespace = svc.Namespace
	e.Namespaces, bad = parseExportTo(svc.Annotations[AnnotationExportTo], svc.Namespace)

	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		target := strings.TrimSuffix(svc.Spec.ExternalName, ".")
		if target == "" {
			return e, bad, false
		}
		e.CanonicalName = target
		return e, bad, true
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		e.Endpoints = endpoints(eps, svc.Spec.PublishNotReadyAddresses)
		e.Ports = slicePorts(eps)
		if len(e.Ports) == 0 {
			// No slice yet (or none with ports): the service's own ports
			// still give SRV names their port numbers.
			e.Ports = servicePorts(svc)
		}
		return e, bad, true
	default:
		e.IPs = clusterIPs(svc)
		if len(e.IPs) == 0 {
			return e, bad, false
		}
		e.Ports = servicePorts(svc)
		return e, bad, true
	}
}

// clusterIPs returns the service's ClusterIPs in the API's order (primary
// family first). Spec.ClusterIPs is authoritative since dual-stack; the
// singular field is read only for objects that lack the list.
func clusterIPs(svc *corev1.Service) []netip.Addr {
	raw := svc.Spec.ClusterIPs
	if len(raw) == 0 && svc.Spec.ClusterIP != "" {
		raw = []string{svc.Spec.ClusterIP}
	}
	var out []netip.Addr
	for _, s := range raw {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			continue // "None" or garbage; the API server validates real IPs
		}
		out = append(out, a.Unmap())
	}
	return out
}

// servicePorts returns the named ports: SRV records exist only for named
// ports (DNS specification, section 2.3.1).
func servicePorts(svc *corev1.Service) []nametable.Port {
	var out []nametable.Port
	for _, p := range svc.Spec.Ports {
		if p.Name == "" || p.Port <= 0 || p.Port > 65535 {
			continue
		}
		out = append(out, nametable.Port{Name: p.Name, Port: uint16(p.Port), Protocol: protocol(p.Protocol)})
	}
	return sortPorts(out)
}

// slicePorts returns the named ports of a headless service's slices: its
// SRV records point at the endpoints, so the port is the endpoint's
// (target) port, which only the slices know.
func slicePorts(eps []*discoveryv1.EndpointSlice) []nametable.Port {
	var out []nametable.Port
	for _, s := range eps {
		for _, p := range s.Ports {
			if p.Name == nil || *p.Name == "" || p.Port == nil || *p.Port <= 0 || *p.Port > 65535 {
				continue
			}
			proto := corev1.ProtocolTCP
			if p.Protocol != nil {
				proto = *p.Protocol
			}
			out = append(out, nametable.Port{Name: *p.Name, Port: uint16(*p.Port), Protocol: protocol(proto)})
		}
	}
	return sortPorts(out)
}

func protocol(p corev1.Protocol) string {
	if p == "" {
		return string(corev1.ProtocolTCP) // the API default
	}
	return string(p)
}

// sortPorts sorts and removes repeats, so equal services give equal
// entries whatever the slice order (the registry compares entries by their
// encoding).
func sortPorts(ps []nametable.Port) []nametable.Port {
	slices.SortFunc(ps, func(a, b nametable.Port) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port))
	})
	return slices.Compact(ps)
}

// endpoints returns one Endpoint per hostname (an IPv4 and an IPv6 slice
// of a dual-stack service both list the pod under the same hostname, and
// the pod should answer A and AAAA) and one per address for endpoints
// without a hostname, sorted.
func endpoints(eps []*discoveryv1.EndpointSlice, publishNotReady bool) []nametable.Endpoint {
	byHost := map[string]int{} // hostname -> index in out
	seen := map[netip.Addr]bool{}
	var out []nametable.Endpoint
	for _, s := range eps {
		if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
			continue // FQDN slices are deprecated and have no DNS meaning here
		}
		for _, ep := range s.Endpoints {
			// A nil Ready means ready (API documentation of
			// EndpointConditions.Ready).
			ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
			if !ready && !publishNotReady {
				continue
			}
			host := ""
			if ep.Hostname != nil {
				host = *ep.Hostname
			}
			for _, raw := range ep.Addresses {
				a, err := netip.ParseAddr(raw)
				if err != nil || a.Zone() != "" {
					// The API server rejects both; a zone would make
					// the agent refuse the whole table.
					continue
				}
				a = a.Unmap()
				if host == "" {
					if seen[a] {
						continue
					}
					seen[a] = true
					out = append(out, nametable.Endpoint{IPs: []netip.Addr{a}})
					continue
				}
				i, ok := byHost[host]
				if !ok {
					i = len(out)
					byHost[host] = i
					out = append(out, nametable.Endpoint{Hostname: host})
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
			return x.Hostname == y.Hostname && slices.Equal(x.IPs, y.IPs)
		})
}
