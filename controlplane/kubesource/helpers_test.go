package kubesource

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

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

// clientset is a Client on client-go's typed clients, so the fake
// clientset (and its reactors) drives the source in unit tests. Production
// uses NewClientForConfig, which the integration tests run.
type clientset struct{ cs kubernetes.Interface }

var _ Client = clientset{}

// typed returns a Client on cs.
func typed(cs kubernetes.Interface) Client { return clientset{cs: cs} }

func (c clientset) Services(ns string) cache.ListerWatcher {
	return &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			return c.cs.CoreV1().Services(ns).List(context.Background(), o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			return c.cs.CoreV1().Services(ns).Watch(context.Background(), o)
		},
	}
}

func (c clientset) EndpointSlices(ns string) cache.ListerWatcher {
	return &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			return c.cs.DiscoveryV1().EndpointSlices(ns).List(context.Background(), o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			return c.cs.DiscoveryV1().EndpointSlices(ns).Watch(context.Background(), o)
		},
	}
}

// restClientFor is the production Client for cfg.
func restClientFor(t testing.TB, cfg *rest.Config) Client {
	t.Helper()
	c, err := NewClientForConfig(cfg)
	if err != nil {
		t.Fatalf("NewClientForConfig: %v", err)
	}
	return c
}

// listSpy is a Client that reports the result of every List its informers
// make, so a test can wait for "the source asked and got this answer"
// instead of sleeping.
type listSpy struct {
	Client
	lists chan listResult // buffered; a full channel drops reports
	// gates, or nil, holds a resource's List until its channel closes
	// (set before the source runs).
	gates map[string]<-chan struct{}
}

// listResult is one List call's resource ("services", "endpointslices")
// and error.
type listResult struct {
	resource string
	err      error
}

func spyOn(c Client) *listSpy { return &listSpy{Client: c, lists: make(chan listResult, 64)} }

func (s *listSpy) Services(ns string) cache.ListerWatcher {
	return s.wrap("services", s.Client.Services(ns))
}

func (s *listSpy) EndpointSlices(ns string) cache.ListerWatcher {
	return s.wrap("endpointslices", s.Client.EndpointSlices(ns))
}

func (s *listSpy) wrap(resource string, lw cache.ListerWatcher) cache.ListerWatcher {
	return &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			if gate := s.gates[resource]; gate != nil {
				<-gate
			}
			obj, err := lw.List(o)
			select {
			case s.lists <- listResult{resource: resource, err: err}:
			default:
			}
			return obj, err
		},
		WatchFunc: lw.Watch,
	}
}

// awaitLists waits until each resource's List has returned once with an
// error for which ok holds (nil ok: any result).
func (s *listSpy) awaitLists(t testing.TB, within time.Duration, ok func(error) bool, resources ...string) {
	t.Helper()
	left := map[string]bool{}
	for _, r := range resources {
		left[r] = true
	}
	deadline := time.After(within)
	for len(left) > 0 {
		select {
		case l := <-s.lists:
			if ok == nil || ok(l.err) {
				delete(left, l.resource)
			}
		case <-deadline:
			t.Fatalf("no matching List result for %v within %v", slices.Sorted(maps.Keys(left)), within)
		}
	}
}
