package difftest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

// kind is the shape of one generated service.
type kind int

const (
	clusterIPv4 kind = iota
	clusterIPv6
	clusterIPDual
	headless
	externalInCluster // ExternalName naming another generated service
	externalOutside   // ExternalName naming a host under example.org
	numKinds
)

// endpoint is one address of a generated EndpointSlice.
type endpoint struct {
	addr     netip.Addr
	hostname string // or ""
	ready    bool
}

// service is one generated Service as the API server stored it, with the
// endpoints the test wrote for it.
type service struct {
	ns, name  string
	kind      kind
	ips       []netip.Addr // ClusterIPs, none for headless and ExternalName
	ports     []corev1.ServicePort
	target    string // ExternalName, or ""
	endpoints []endpoint
}

func (s *service) fqdn() string { return s.name + "." + s.ns + ".svc.cluster.local." }

// world is a generated cluster.
type world struct {
	namespaces []string
	services   []*service
	sentinel   string // the endpoint name written last
}

// portChoices are the named ports a service draws from.
var portChoices = []corev1.ServicePort{
	{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP},
	{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
	{Name: "grpc", Port: 9000, Protocol: corev1.ProtocolTCP},
	{Name: "metrics", Port: 9090, Protocol: corev1.ProtocolTCP},
}

// generate writes a random cluster of about size services to c, drawn
// from rng: services of every kind spread over a few namespaces, and
// EndpointSlices for the headless ones and some ClusterIP ones. Endpoint
// addresses are unique, so every address has one PTR answer.
func generate(ctx context.Context, t testing.TB, c *kubetest.Cluster, rng *rand.Rand, size int) *world {
	t.Helper()
	return generateIn(ctx, t, c, rng, size, 1)
}

// generateIn is generate with endpoint addresses in 10.<net>.0.0/16 and
// fd00:<net>::/32, so several worlds in one API server do not share an
// address (each address must have one PTR answer).
func generateIn(ctx context.Context, t testing.TB, c *kubetest.Cluster, rng *rand.Rand, size int, net byte) *world {
	t.Helper()
	w := &world{}
	for i := range 3 {
		w.namespaces = append(w.namespaces, c.Namespace(t, fmt.Sprintf("d%d", i)))
	}
	next := uint32(0) // endpoint address counter
	newAddr := func(v6 bool) netip.Addr {
		next++
		if v6 {
			return netip.AddrFrom16([16]byte{0xfd, 0, 0, net, 14: byte(next >> 8), 15: byte(next)})
		}
		return netip.AddrFrom4([4]byte{10, net, byte(next >> 8), byte(next)})
	}
	for i := range size {
		s := &service{ns: w.namespaces[rng.IntN(len(w.namespaces))], name: fmt.Sprintf("s%d", i), kind: kind(rng.IntN(int(numKinds)))}
		if (s.kind == externalInCluster) && len(w.services) == 0 {
			s.kind = clusterIPv4
		}
		spec := corev1.ServiceSpec{}
		if s.kind != externalInCluster && s.kind != externalOutside {
			perm := rng.Perm(len(portChoices))
			for _, p := range perm[:1+rng.IntN(2)] {
				spec.Ports = append(spec.Ports, portChoices[p])
			}
		}
		single, dual := corev1.IPFamilyPolicySingleStack, corev1.IPFamilyPolicyRequireDualStack
		switch s.kind {
		case clusterIPv4:
			spec.IPFamilyPolicy, spec.IPFamilies = &single, []corev1.IPFamily{corev1.IPv4Protocol}
		case clusterIPv6:
			spec.IPFamilyPolicy, spec.IPFamilies = &single, []corev1.IPFamily{corev1.IPv6Protocol}
		case clusterIPDual:
			spec.IPFamilyPolicy = &dual
		case headless:
			spec.ClusterIP = corev1.ClusterIPNone
		case externalInCluster:
			spec.Type, spec.ExternalName = corev1.ServiceTypeExternalName, w.services[rng.IntN(len(w.services))].fqdn()
			spec.ExternalName = spec.ExternalName[:len(spec.ExternalName)-1]
		case externalOutside:
			spec.Type, spec.ExternalName = corev1.ServiceTypeExternalName, fmt.Sprintf("ext%d.example.org", i)
		}
		s.ports, s.target = spec.Ports, spec.ExternalName
		got, err := c.Client.CoreV1().Services(s.ns).Create(ctx, &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: s.name}, Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create service %s/%s: %v", s.ns, s.name, err)
		}
		for _, ip := range got.Spec.ClusterIPs {
			if a, err := netip.ParseAddr(ip); err == nil {
				s.ips = append(s.ips, a)
			}
		}
		// Endpoints: every headless service, and a third of the ClusterIP
		// ones (their endpoint names exist too).
		if s.kind == headless || (s.kind <= clusterIPDual && rng.IntN(3) == 0) {
			v6 := s.kind == clusterIPv6 || (s.kind == headless && rng.IntN(3) == 0)
			family := discoveryv1.AddressTypeIPv4
			if v6 {
				family = discoveryv1.AddressTypeIPv6
			}
			slice := &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Name: s.name + "-1",
					Labels: map[string]string{discoveryv1.LabelServiceName: s.name}},
				AddressType: family,
			}
			for _, p := range s.ports {
				slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: &p.Name, Port: &p.Port, Protocol: &p.Protocol})
			}
			n := 1 + rng.IntN(4)
			if s.kind == headless && rng.IntN(8) == 0 {
				n = 40 // too many A records for 512 bytes: TC over UDP without EDNS
			}
			for j := range n {
				e := endpoint{addr: newAddr(v6), ready: rng.IntN(5) != 0}
				ep := discoveryv1.Endpoint{Addresses: []string{e.addr.String()}, Conditions: discoveryv1.EndpointConditions{Ready: &e.ready}}
				if rng.IntN(2) == 0 {
					e.hostname = fmt.Sprintf("h%d", j)
					ep.Hostname = &e.hostname
				}
				s.endpoints = append(s.endpoints, e)
				slice.Endpoints = append(slice.Endpoints, ep)
			}
			if _, err := c.Client.DiscoveryV1().EndpointSlices(s.ns).Create(ctx, slice, metav1.CreateOptions{}); err != nil {
				t.Fatalf("create slice %s/%s: %v", s.ns, slice.Name, err)
			}
		}
		w.services = append(w.services, s)
	}
	// The sentinel is written last: a server that answers its endpoint
	// name has seen every Service and EndpointSlice before it (each watch
	// delivers in write order).
	if _, err := c.Client.CoreV1().Services(w.namespaces[0]).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "sentinel"},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create sentinel service: %v", err)
	}
	ready, host := true, "last"
	if _, err := c.Client.DiscoveryV1().EndpointSlices(w.namespaces[0]).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "sentinel-1", Labels: map[string]string{discoveryv1.LabelServiceName: "sentinel"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints: []discoveryv1.Endpoint{{Addresses: []string{"10.2.0.1"}, Hostname: &host,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create sentinel slice: %v", err)
	}
	w.sentinel = host + ".sentinel." + w.namespaces[0] + ".svc.cluster.local."
	return w
}
