package kubesource

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/meshdns/meshdns/controlplane/registry"
)

// fat adds what a real API object carries and the table does not need.
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
	svc := clusterIPService("ns", "web", "10.96.0.10", "fd00::a")
	fatMeta(&svc.ObjectMeta)
	svc.Annotations[AnnotationExportTo] = "a"
	svc.Spec.Selector = map[string]string{"app": "web"}
	svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{Port: 9, TargetPort: intstr.FromInt(9), NodePort: 30009})
	svc.Spec.SessionAffinity = corev1.ServiceAffinityClientIP
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "1.2.3.4"}}

	got, err := transformService(svc)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "web",
			Annotations: map[string]string{AnnotationExportTo: "a"},
		},
		Spec: corev1.ServiceSpec{
			Type:       corev1.ServiceTypeClusterIP,
			ClusterIP:  "10.96.0.10",
			ClusterIPs: []string{"10.96.0.10", "fd00::a"},
			Ports:      []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("transformService (-want +got):\n%s", diff)
	}
	again, _ := transformService(got)
	if diff := cmp.Diff(got, again); diff != "" {
		t.Errorf("transform not idempotent (-first +second):\n%s", diff)
	}
	assertSameEntry(t, svc, got.(*corev1.Service), nil, nil)
}

func TestTransformEndpointSlice(t *testing.T) {
	s := slice("ns", "db-1", "db", discoveryv1.AddressTypeIPv4,
		ep{addrs: []string{"10.1.0.2"}, hostname: "db-0", ready: ptr(true)},
		ep{addrs: []string{"10.1.0.3"}, ready: ptr(false)},
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

	got, err := transformEndpointSlice(s)
	if err != nil {
		t.Fatal(err)
	}
	port, name, proto := int32(5432), "db", corev1.ProtocolTCP
	want := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: "ns", Name: "db-1",
			Labels:      map[string]string{discoveryv1.LabelServiceName: "db"},
			Annotations: map[string]string{corev1.EndpointsLastChangeTriggerTime: "2026-01-02T03:04:05.123456789Z"},
		},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
		Endpoints: []discoveryv1.Endpoint{
			{Addresses: []string{"10.1.0.2"}, Hostname: ptr("db-0"), Conditions: discoveryv1.EndpointConditions{Ready: ptr(true)}},
			{Addresses: []string{"10.1.0.3"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr(false)}},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("transformEndpointSlice (-want +got):\n%s", diff)
	}
	again, _ := transformEndpointSlice(got)
	if diff := cmp.Diff(got, again); diff != "" {
		t.Errorf("transform not idempotent (-first +second):\n%s", diff)
	}
	svc := headlessService("ns", "db")
	assertSameEntry(t, svc, svc, []*discoveryv1.EndpointSlice{s}, []*discoveryv1.EndpointSlice{got.(*discoveryv1.EndpointSlice)})
}

func TestTransformLeavesOtherObjects(t *testing.T) {
	for _, obj := range []any{"x", &corev1.Pod{}} {
		if got, _ := transformService(obj); got != obj {
			t.Errorf("transformService changed %T", obj)
		}
		if got, _ := transformEndpointSlice(obj); got != obj {
			t.Errorf("transformEndpointSlice changed %T", obj)
		}
	}
}

// assertSameEntry checks that the transform kept everything buildEntry reads.
func assertSameEntry(t *testing.T, full, slim *corev1.Service, fullEPs, slimEPs []*discoveryv1.EndpointSlice) {
	t.Helper()
	a, _, okA := buildEntry(full, fullEPs, "cluster.local")
	b, _, okB := buildEntry(slim, slimEPs, "cluster.local")
	if okA != okB || !sameEntry(a, b) {
		t.Errorf("entry changed by the transform:\n%s", cmp.Diff([]registry.Entry{a}, []registry.Entry{b}, entryOpts()))
	}
}
