package kubesource

import (
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/registry"
)

// Object constructors shared by the unit and integration tests.

func clusterIPService(ns, name string, ips ...string) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			Type:  corev1.ServiceTypeClusterIP,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	if len(ips) > 0 {
		svc.Spec.ClusterIP = ips[0]
		svc.Spec.ClusterIPs = ips
	}
	return svc
}

func headlessService(ns, name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.ServiceSpec{
			ClusterIP:  corev1.ClusterIPNone,
			ClusterIPs: []string{corev1.ClusterIPNone},
			Ports:      []corev1.ServicePort{{Name: "db", Port: 5432, Protocol: corev1.ProtocolTCP}},
		},
	}
}

func externalNameService(ns, name, target string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: target},
	}
}

// ep is one endpoint for slice: ready nil means the condition is absent.
type ep struct {
	addrs    []string
	hostname string
	ready    *bool
}

func slice(ns, name, service string, family discoveryv1.AddressType, eps ...ep) *discoveryv1.EndpointSlice {
	port, portName, proto := int32(5432), "db", corev1.ProtocolTCP
	s := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: service},
		},
		AddressType: family,
		Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &port, Protocol: &proto}},
	}
	for _, e := range eps {
		d := discoveryv1.Endpoint{Addresses: e.addrs, Conditions: discoveryv1.EndpointConditions{Ready: e.ready}}
		if e.hostname != "" {
			d.Hostname = &e.hostname
		}
		s.Endpoints = append(s.Endpoints, d)
	}
	return s
}

func ptr[T any](v T) *T { return &v }

// build is buildEntry on API objects, through the cache transforms.
func build(svc *corev1.Service, slices []*discoveryv1.EndpointSlice) (registry.Entry, []string, bool) {
	return buildEntry(newService(svc), cached(slices), "cluster.local")
}

func cached(slices []*discoveryv1.EndpointSlice) []*endpointSlice {
	out := make([]*endpointSlice, len(slices))
	for i, s := range slices {
		out[i] = newEndpointSlice(s)
	}
	return out
}

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}
