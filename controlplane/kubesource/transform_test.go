package kubesource

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/tools/cache"

	"github.com/meshdns/meshdns/pkg/nametable"
)

var cmpCached = cmp.Options{cmp.AllowUnexported(service{}, endpointSlice{}, endpoint{}), cmp.Comparer(func(a, b netip.Addr) bool { return a == b }),
	cmp.Comparer(func(a, b topo) bool { return a == b })}

// fatMeta adds what a real API object carries and the table does not need.
func fatMeta(m *metav1.ObjectMeta) {
	m.ResourceVersion = "42"
	m.UID = "uid-1"
	m.Generation = 3
	m.CreationTimestamp = metav1.NewTime(time.Unix(1_700_000_000, 0))
	m.Finalizers = []string{"x/y"}
	m.OwnerReferences = []metav1.OwnerReference{{Name: "owner"}}
	m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	if m.Annotations == nil {
		m.Annotations = map[string]string{}
	}
	m.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = `{"big":"json"}`
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels["app"] = "web"
}

func TestTransformService(t *testing.T) {
	tests := []struct {
		name string
		svc  func() *corev1.Service
		want *service
	}{
		{
			name: "dual-stack cluster IP with annotations, selector, status and unnamed ports",
			svc: func() *corev1.Service {
				svc := clusterIPService("ns", "web", "10.96.0.10", "::ffff:10.96.0.11", "fd00::a")
				fatMeta(&svc.ObjectMeta)
				svc.Annotations[AnnotationExportTo] = "a"
				svc.Spec.Selector = map[string]string{"app": "web"}
				svc.Spec.Ports = append(svc.Spec.Ports,
					corev1.ServicePort{Port: 9, TargetPort: intstr.FromInt(9), NodePort: 30009},
					corev1.ServicePort{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP})
				svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
				svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "1.2.3.4"}}
				return svc
			},
			want: &service{
				name: "web", namespace: "ns", exportTo: "a", kind: kindClusterIP,
				clusterIPs: addrs("10.96.0.10", "10.96.0.11", "fd00::a"),
				ports:      []nametable.Port{{Name: "dns", Port: 53, Protocol: "UDP"}, {Name: "http", Port: 80, Protocol: "TCP"}},
			},
		},
		{
			name: "zoned and garbage cluster IPs are dropped",
			svc:  func() *corev1.Service { return clusterIPService("ns", "web", "fe80::1%eth0", "nonsense") },
			want: &service{name: "web", namespace: "ns", kind: kindClusterIP, ports: []nametable.Port{{Name: "http", Port: 80, Protocol: "TCP"}}},
		},
		{
			name: "headless with publishNotReadyAddresses",
			svc: func() *corev1.Service {
				s := headlessService("ns", "db")
				s.Spec.PublishNotReadyAddresses = true
				return s
			},
			want: &service{name: "db", namespace: "ns", kind: kindHeadless, publishNotReady: true,
				ports: []nametable.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}},
		},
		{
			name: "external name loses its trailing dot",
			svc:  func() *corev1.Service { return externalNameService("ns", "ext", "db.example.com.") },
			want: &service{name: "ext", namespace: "ns", kind: kindExternalName, externalName: "db.example.com"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := transformService(tt.svc())
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, cmpCached); diff != "" {
				t.Errorf("transformService (-want +got):\n%s", diff)
			}
			again, _ := transformService(got)
			if again != got {
				t.Errorf("transform of a cached service changed it")
			}
			key, err := cache.MetaNamespaceKeyFunc(got)
			if want := tt.want.namespace + "/" + tt.want.name; err != nil || key != want {
				t.Errorf("cache key = %q, %v; want %q", key, err, want)
			}
		})
	}
}

func TestTransformEndpointSlice(t *testing.T) {
	s := slice("ns", "db-1", "db", discoveryv1.AddressTypeIPv4,
		ep{addrs: []string{"10.1.0.2"}, hostname: "db-0", ready: ptr(true)},
		ep{addrs: []string{"10.1.0.3", "junk"}, ready: ptr(false)},
		ep{addrs: []string{"10.1.0.4"}},
		ep{addrs: []string{"junk"}},
	)
	fatMeta(&s.ObjectMeta)
	s.Annotations[corev1.EndpointsLastChangeTriggerTime] = "2026-01-02T03:04:05.123456789Z"
	for i := range s.Endpoints {
		s.Endpoints[i].NodeName = ptr("node-1")
		s.Endpoints[i].Zone = ptr("zone-a")
		s.Endpoints[i].TargetRef = &corev1.ObjectReference{Kind: "Pod", Name: "db-0"}
		s.Endpoints[i].Conditions.Serving = ptr(true)
		s.Endpoints[i].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}}
	}
	unnamed := int32(1)
	s.Ports = append(s.Ports, discoveryv1.EndpointPort{Port: &unnamed})

	zoneA := newTopo(ptr("zone-a"), &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}}})
	got, err := transformEndpointSlice(s)
	if err != nil {
		t.Fatal(err)
	}
	want := &endpointSlice{
		name: "db-1", namespace: "ns", serviceName: "db", triggerTime: "2026-01-02T03:04:05.123456789Z",
		ports: []nametable.Port{{Name: "db", Port: 5432, Protocol: "TCP"}},
		endpoints: []endpoint{
			{hostname: "db-0", addrs: addrs("10.1.0.2"), ready: true, topo: zoneA},
			{addrs: addrs("10.1.0.3"), ready: false, topo: zoneA},
			{addrs: addrs("10.1.0.4"), ready: true, topo: zoneA},
		},
	}
	if diff := cmp.Diff(want, got, cmpCached); diff != "" {
		t.Errorf("transformEndpointSlice (-want +got):\n%s", diff)
	}
	if again, _ := transformEndpointSlice(got); again != got {
		t.Errorf("transform of a cached slice changed it")
	}
	if k := sliceServiceKey(got); k != "ns/db" {
		t.Errorf("service key = %q, want ns/db", k)
	}

	fqdn := slice("ns", "db-f", "db", discoveryv1.AddressTypeFQDN, ep{addrs: []string{"a.example.com"}})
	if got := newEndpointSlice(fqdn); len(got.endpoints) != 0 {
		t.Errorf("FQDN slice kept endpoints: %v", got.endpoints)
	}
}

func TestTransformLeavesOtherObjects(t *testing.T) {
	for _, obj := range []any{"x", &corev1.Pod{}, cache.DeletedFinalStateUnknown{Key: "a/b"}} {
		if got, _ := transformService(obj); !cmp.Equal(got, obj) {
			t.Errorf("transformService changed %T", obj)
		}
		if got, _ := transformEndpointSlice(obj); !cmp.Equal(got, obj) {
			t.Errorf("transformEndpointSlice changed %T", obj)
		}
	}
}
