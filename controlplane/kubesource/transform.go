package kubesource

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/pkg/nametable"
)

// The informer caches hold every Service and EndpointSlice for the life of
// the control plane, so the transforms replace each decoded object, before
// it enters the cache, with a small struct of only what buildEntry and the
// event handlers read, already parsed. A corev1.Service is about 800 bytes
// even with every optional field empty; a service here is about 150. The
// decoded object (managedFields, last-applied-configuration, selectors,
// status, target references, topology) becomes garbage at once.
//
// client-go's cache needs only a key from a stored object, which it gets
// through metav1.ObjectMetaAccessor; nothing in the informer path asserts
// runtime.Object (only listers and the debug mutation detector would, and
// this package uses neither).
//
// Both transforms leave anything else (tombstones, objects already
// transformed) alone, which makes them idempotent as client-go requires.

// serviceKind is how a Service answers.
type serviceKind uint8

const (
	kindClusterIP    serviceKind = iota // ClusterIP, NodePort, LoadBalancer
	kindHeadless                        // clusterIP: None
	kindExternalName                    // type: ExternalName
)

// service is what the cache keeps of a Service.
type service struct {
	name, namespace string
	exportTo        string // the meshdns.io/export-to annotation, "" if absent
	kind            serviceKind
	publishNotReady bool
	clusterIPs      []netip.Addr     // kindClusterIP: in the API's order
	externalName    string           // kindExternalName: without trailing dot
	ports           []nametable.Port // named ports, sorted; shared with entries
}

// endpointSlice is what the cache keeps of an EndpointSlice.
type endpointSlice struct {
	name, namespace string
	serviceName     string // the kubernetes.io/service-name label
	triggerTime     string // endpoints.kubernetes.io/last-change-trigger-time
	ports           []nametable.Port
	endpoints       []endpoint
}

// endpoint is one endpoint of a slice.
type endpoint struct {
	hostname string
	addrs    []netip.Addr
	ready    bool
	// topo is the endpoint's zone and hints (topology.go).
	topo topo
}

// GetObjectMeta gives client-go the key of a cached service. It allocates;
// the cache calls it once per event, not per lookup.
func (s *service) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: s.name, Namespace: s.namespace}
}

// GetObjectMeta gives client-go the key of a cached slice.
func (s *endpointSlice) GetObjectMeta() metav1.Object {
	return &metav1.ObjectMeta{Name: s.name, Namespace: s.namespace}
}

var (
	_ metav1.ObjectMetaAccessor = (*service)(nil)
	_ metav1.ObjectMetaAccessor = (*endpointSlice)(nil)
)

func transformService(obj any) (any, error) {
	if svc, ok := obj.(*corev1.Service); ok {
		return newService(svc), nil
	}
	return obj, nil
}

func transformEndpointSlice(obj any) (any, error) {
	if s, ok := obj.(*discoveryv1.EndpointSlice); ok {
		return newEndpointSlice(s), nil
	}
	return obj, nil
}

func newService(svc *corev1.Service) *service {
	out := &service{
		name:            svc.Name,
		namespace:       svc.Namespace,
		exportTo:        svc.Annotations[AnnotationExportTo],
		publishNotReady: svc.Spec.PublishNotReadyAddresses,
	}
	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName:
		out.kind = kindExternalName
		out.externalName = strings.TrimSuffix(svc.Spec.ExternalName, ".")
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		out.kind = kindHeadless
	default:
		out.kind = kindClusterIP
		out.clusterIPs = clusterIPs(svc)
	}
	for _, p := range svc.Spec.Ports {
		// SRV records exist only for named ports (DNS specification,
		// section 2.3.1).
		if p.Name == "" || p.Port <= 0 || p.Port > 65535 {
			continue
		}
		out.ports = append(out.ports, nametable.Port{Name: p.Name, Port: uint16(p.Port), Protocol: protocol(p.Protocol)})
	}
	out.ports = sortPorts(out.ports)
	return out
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
		if a, ok := parseAddr(s); ok {
			out = append(out, a)
		}
	}
	return out
}

func newEndpointSlice(s *discoveryv1.EndpointSlice) *endpointSlice {
	out := &endpointSlice{
		name:        s.Name,
		namespace:   s.Namespace,
		serviceName: s.Labels[discoveryv1.LabelServiceName],
		triggerTime: s.Annotations[corev1.EndpointsLastChangeTriggerTime],
	}
	for _, p := range s.Ports {
		if p.Name == nil || *p.Name == "" || p.Port == nil || *p.Port <= 0 || *p.Port > 65535 {
			continue
		}
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		out.ports = append(out.ports, nametable.Port{Name: *p.Name, Port: uint16(*p.Port), Protocol: protocol(proto)})
	}
	out.ports = sortPorts(out.ports)
	if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
		return out // FQDN slices are deprecated and have no DNS meaning here
	}
	for _, ep := range s.Endpoints {
		e := endpoint{
			// A nil Ready means ready (API documentation of
			// EndpointConditions.Ready).
			ready: ep.Conditions.Ready == nil || *ep.Conditions.Ready,
		}
		if ep.Hostname != nil {
			e.hostname = *ep.Hostname
		}
		e.topo = newTopo(ep.Zone, ep.Hints)
		for _, raw := range ep.Addresses {
			if a, ok := parseAddr(raw); ok {
				e.addrs = append(e.addrs, a)
			}
		}
		if len(e.addrs) > 0 {
			out.endpoints = append(out.endpoints, e)
		}
	}
	return out
}

// parseAddr parses an API address, unmapped. The API server rejects
// garbage and zones; a zone would make the agent refuse the whole table,
// so it is dropped here too.
func parseAddr(s string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(s)
	if err != nil || a.Zone() != "" {
		return netip.Addr{}, false
	}
	return a.Unmap(), true
}

func protocol(p corev1.Protocol) string {
	if p == "" {
		return string(corev1.ProtocolTCP) // the API default
	}
	return string(p)
}

// sortPorts sorts and removes repeats, so equal services give equal
// entries whatever the API's order (the registry compares entries by their
// encoding).
func sortPorts(ps []nametable.Port) []nametable.Port {
	slices.SortFunc(ps, func(a, b nametable.Port) int {
		return cmp.Or(strings.Compare(a.Name, b.Name), strings.Compare(a.Protocol, b.Protocol), cmp.Compare(a.Port, b.Port))
	})
	return slices.Clip(slices.Compact(ps))
}

// asService returns the cached form of a stored Service: the cache holds
// *service, or *corev1.Service when the transforms are off (memory test).
func asService(obj any) *service {
	switch o := obj.(type) {
	case *service:
		return o
	case *corev1.Service:
		return newService(o)
	}
	return nil
}

// asEndpointSlice is asService for EndpointSlices.
func asEndpointSlice(obj any) *endpointSlice {
	switch o := obj.(type) {
	case *endpointSlice:
		return o
	case *discoveryv1.EndpointSlice:
		return newEndpointSlice(o)
	}
	return nil
}
