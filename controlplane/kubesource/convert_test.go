package kubesource

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// cmpAddr compares netip.Addr values by value.
var cmpAddr = cmp.Comparer(func(a, b netip.Addr) bool { return a == b })

func entryOpts() cmp.Options {
	return cmp.Options{cmpAddr, cmpopts.EquateEmpty()}
}

func kubeEntry(ns, name string) registry.Entry {
	return registry.Entry{Entry: nametable.Entry{
		Hostname: name + "." + ns + ".svc.cluster.local", Registry: RegistryName, ShortName: name, Namespace: ns,
	}}
}

func TestBuildEntry(t *testing.T) {
	httpPort := []nametable.Port{{Name: "http", Port: 80, Protocol: "TCP"}}
	dbPort := []nametable.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}
	with := func(e registry.Entry, f func(*registry.Entry)) registry.Entry { f(&e); return e }

	tests := []struct {
		name   string
		svc    *corev1.Service
		slices []*discoveryv1.EndpointSlice
		want   registry.Entry
		wantOK bool
	}{
		{
			name:   "cluster IP v4 with named port",
			svc:    clusterIPService("ns", "web", "10.96.0.10"),
			want:   with(kubeEntry("ns", "web"), func(e *registry.Entry) { e.IPs = addrs("10.96.0.10"); e.Ports = httpPort }),
			wantOK: true,
		},
		{
			name:   "cluster IP v6",
			svc:    clusterIPService("ns", "web", "fd00:10:96::a"),
			want:   with(kubeEntry("ns", "web"), func(e *registry.Entry) { e.IPs = addrs("fd00:10:96::a"); e.Ports = httpPort }),
			wantOK: true,
		},
		{
			name: "dual-stack keeps the API order",
			svc:  clusterIPService("ns", "web", "fd00:10:96::a", "10.96.0.10"),
			want: with(kubeEntry("ns", "web"), func(e *registry.Entry) {
				e.IPs = addrs("fd00:10:96::a", "10.96.0.10")
				e.Ports = httpPort
			}),
			wantOK: true,
		},
		{
			name: "only the singular clusterIP field",
			svc: func() *corev1.Service {
				s := clusterIPService("ns", "web")
				s.Spec.ClusterIP = "10.96.0.11"
				return s
			}(),
			want:   with(kubeEntry("ns", "web"), func(e *registry.Entry) { e.IPs = addrs("10.96.0.11"); e.Ports = httpPort }),
			wantOK: true,
		},
		{
			name: "unnamed and out-of-range ports make no SRV, UDP and default protocol kept",
			svc: func() *corev1.Service {
				s := clusterIPService("ns", "dns", "10.96.0.53")
				s.Spec.Ports = []corev1.ServicePort{
					{Port: 8080},
					{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
					{Name: "dns-tcp", Port: 53},
					{Name: "bad", Port: 70000},
				}
				return s
			}(),
			want: with(kubeEntry("ns", "dns"), func(e *registry.Entry) {
				e.IPs = addrs("10.96.0.53")
				e.Ports = []nametable.Port{{Name: "dns", Port: 53, Protocol: "UDP"}, {Name: "dns-tcp", Port: 53, Protocol: "TCP"}}
			}),
			wantOK: true,
		},
		{
			name: "load balancer answers with its cluster IP",
			svc: func() *corev1.Service {
				s := clusterIPService("ns", "lb", "10.96.0.12")
				s.Spec.Type = corev1.ServiceTypeLoadBalancer
				return s
			}(),
			want:   with(kubeEntry("ns", "lb"), func(e *registry.Entry) { e.IPs = addrs("10.96.0.12"); e.Ports = httpPort }),
			wantOK: true,
		},
		{
			name:   "no cluster IP allocated yet",
			svc:    clusterIPService("ns", "web"),
			want:   kubeEntry("ns", "web"),
			wantOK: false,
		},
		{
			name:   "external name without trailing dot",
			svc:    externalNameService("ns", "ext", "db.example.com."),
			want:   with(kubeEntry("ns", "ext"), func(e *registry.Entry) { e.CanonicalName = "db.example.com" }),
			wantOK: true,
		},
		{
			name:   "empty external name",
			svc:    externalNameService("ns", "ext", ""),
			want:   kubeEntry("ns", "ext"),
			wantOK: false,
		},
		{
			name: "headless: ready and nil-ready endpoints, not the not-ready one",
			svc:  headlessService("ns", "db"),
			slices: []*discoveryv1.EndpointSlice{slice("ns", "db-1", "db", discoveryv1.AddressTypeIPv4,
				ep{addrs: []string{"10.1.0.2"}, ready: ptr(true)},
				ep{addrs: []string{"10.1.0.3"}},
				ep{addrs: []string{"10.1.0.4"}, ready: ptr(false)},
			)},
			want: with(kubeEntry("ns", "db"), func(e *registry.Entry) {
				e.Ports = dbPort
				e.Endpoints = []nametable.Endpoint{{IPs: addrs("10.1.0.2")}, {IPs: addrs("10.1.0.3")}}
			}),
			wantOK: true,
		},
		{
			name: "headless with publishNotReadyAddresses",
			svc: func() *corev1.Service {
				s := headlessService("ns", "db")
				s.Spec.PublishNotReadyAddresses = true
				return s
			}(),
			slices: []*discoveryv1.EndpointSlice{slice("ns", "db-1", "db", discoveryv1.AddressTypeIPv4,
				ep{addrs: []string{"10.1.0.4"}, ready: ptr(false)},
			)},
			want: with(kubeEntry("ns", "db"), func(e *registry.Entry) {
				e.Ports = dbPort
				e.Endpoints = []nametable.Endpoint{{IPs: addrs("10.1.0.4")}}
			}),
			wantOK: true,
		},
		{
			name: "headless hostnames merge v4 and v6 slices, sorted; repeats dropped",
			svc:  headlessService("ns", "db"),
			slices: []*discoveryv1.EndpointSlice{
				slice("ns", "db-v6", "db", discoveryv1.AddressTypeIPv6,
					ep{addrs: []string{"fd00::2"}, hostname: "db-0"},
					ep{addrs: []string{"fd00::3"}, hostname: "db-1"},
				),
				slice("ns", "db-v4", "db", discoveryv1.AddressTypeIPv4,
					ep{addrs: []string{"10.1.0.3"}, hostname: "db-1"},
					ep{addrs: []string{"10.1.0.2"}, hostname: "db-0"},
					ep{addrs: []string{"10.1.0.9"}},
				),
				// The same endpoint in a second slice, as during a slice
				// split by the EndpointSlice controller.
				slice("ns", "db-v4b", "db", discoveryv1.AddressTypeIPv4,
					ep{addrs: []string{"10.1.0.9"}},
					ep{addrs: []string{"10.1.0.2"}, hostname: "db-0"},
				),
			},
			want: with(kubeEntry("ns", "db"), func(e *registry.Entry) {
				e.Ports = dbPort
				e.Endpoints = []nametable.Endpoint{
					{IPs: addrs("10.1.0.9")},
					{Hostname: "db-0", IPs: addrs("10.1.0.2", "fd00::2")},
					{Hostname: "db-1", IPs: addrs("10.1.0.3", "fd00::3")},
				}
			}),
			wantOK: true,
		},
		{
			name: "headless ignores FQDN slices and unparsable addresses",
			svc:  headlessService("ns", "db"),
			slices: []*discoveryv1.EndpointSlice{
				slice("ns", "db-f", "db", discoveryv1.AddressTypeFQDN, ep{addrs: []string{"a.example.com"}}),
				slice("ns", "db-4", "db", discoveryv1.AddressTypeIPv4, ep{addrs: []string{"nonsense", "10.1.0.5"}}),
			},
			want: with(kubeEntry("ns", "db"), func(e *registry.Entry) {
				e.Ports = dbPort
				e.Endpoints = []nametable.Endpoint{{IPs: addrs("10.1.0.5")}}
			}),
			wantOK: true,
		},
		{
			name: "headless takes the slices' target ports",
			svc: func() *corev1.Service {
				s := headlessService("ns", "db")
				s.Spec.Ports = []corev1.ServicePort{{Name: "db", Port: 1}}
				return s
			}(),
			slices: []*discoveryv1.EndpointSlice{slice("ns", "db-1", "db", discoveryv1.AddressTypeIPv4)},
			want:   with(kubeEntry("ns", "db"), func(e *registry.Entry) { e.Ports = dbPort }),
			wantOK: true,
		},
		{
			name:   "headless without slices: a name with no endpoints and the service ports",
			svc:    headlessService("ns", "db"),
			want:   with(kubeEntry("ns", "db"), func(e *registry.Entry) { e.Ports = dbPort }),
			wantOK: true,
		},
		{
			name: "export-to annotation",
			svc: func() *corev1.Service {
				s := clusterIPService("ns", "web", "10.96.0.10")
				s.Annotations = map[string]string{AnnotationExportTo: "b, a"}
				return s
			}(),
			want: with(kubeEntry("ns", "web"), func(e *registry.Entry) {
				e.IPs = addrs("10.96.0.10")
				e.Ports = httpPort
				e.Namespaces = []string{"a", "b", "ns"}
			}),
			wantOK: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, ok := build(tt.svc, tt.slices)
			if ok != tt.wantOK {
				t.Fatalf("ok = %v, want %v", ok, tt.wantOK)
			}
			if !ok {
				return
			}
			if diff := cmp.Diff(tt.want, got, entryOpts()); diff != "" {
				t.Errorf("buildEntry (-want +got):\n%s", diff)
			}
			if !sameEntry(got, got) {
				t.Errorf("sameEntry(e, e) = false")
			}
		})
	}
}

// TestBuildEntryOrderIndependent checks that the order of slices and
// endpoints does not change the entry, so the registry sees no change when
// the API server lists them in another order.
func TestBuildEntryOrderIndependent(t *testing.T) {
	svc := headlessService("ns", "db")
	a := slice("ns", "a", "db", discoveryv1.AddressTypeIPv4, ep{addrs: []string{"10.0.0.2"}}, ep{addrs: []string{"10.0.0.1"}, hostname: "x"})
	b := slice("ns", "b", "db", discoveryv1.AddressTypeIPv6, ep{addrs: []string{"fd00::1"}, hostname: "x"}, ep{addrs: []string{"fd00::9"}})
	e1, _, _ := build(svc, []*discoveryv1.EndpointSlice{a, b})
	e2, _, _ := build(svc, []*discoveryv1.EndpointSlice{b, a})
	if !sameEntry(e1, e2) {
		t.Errorf("entries differ by slice order:\n%s", cmp.Diff(e1, e2, entryOpts()))
	}
}

func TestSameEntry(t *testing.T) {
	base := func() registry.Entry {
		e := kubeEntry("ns", "db")
		e.IPs = addrs("10.0.0.1")
		e.Ports = []nametable.Port{{Name: "db", Port: 1, Protocol: "TCP"}}
		e.Endpoints = []nametable.Endpoint{{Hostname: "h", IPs: addrs("10.1.0.1")}}
		e.Namespaces = []string{"a"}
		return e
	}
	tests := []struct {
		name   string
		change func(*registry.Entry)
		want   bool
	}{
		{name: "equal", change: func(*registry.Entry) {}, want: true},
		{name: "ip", change: func(e *registry.Entry) { e.IPs = addrs("10.0.0.2") }, want: false},
		{name: "port", change: func(e *registry.Entry) { e.Ports[0].Port = 2 }, want: false},
		{name: "endpoint ip", change: func(e *registry.Entry) { e.Endpoints[0].IPs = addrs("10.1.0.2") }, want: false},
		{name: "endpoint hostname", change: func(e *registry.Entry) { e.Endpoints[0].Hostname = "g" }, want: false},
		{name: "namespaces", change: func(e *registry.Entry) { e.Namespaces = nil }, want: false},
		{name: "canonical name", change: func(e *registry.Entry) { e.CanonicalName = "x.example" }, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := base()
			tt.change(&e)
			if got := sameEntry(base(), e); got != tt.want {
				t.Errorf("sameEntry = %v, want %v", got, tt.want)
			}
		})
	}
}
