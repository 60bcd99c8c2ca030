package kubesource

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// The memory test measures what the source keeps at a large cluster's scale:
// 10,000 ClusterIP services and 1,000 headless services of 10 endpoints
// each, in 100 namespaces. The objects look like what the API server
// returns: kubectl-applied Services (last-applied annotation,
// managedFields, selector) and controller-written EndpointSlices
// (managedFields, target references, node names, zones, trigger time).
const (
	memServices = 10_000
	memHeadless = 1_000
	memEPs      = 10
	memNS       = 100
)

var ts = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

func realisticMeta(ns, name, manager string, fields int) metav1.ObjectMeta {
	raw := []byte(`{"f:metadata":{"f:labels":{".":{},"f:app":{},"f:app.kubernetes.io/part-of":{}}},"f:spec":{`)
	for i := range fields {
		raw = fmt.Appendf(raw, `"k:{\"port\":%d,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{},"f:protocol":{},"f:targetPort":{}},`, 8000+i)
	}
	raw = append(raw, `"f:selector":{},"f:sessionAffinity":{},"f:type":{}}}`...)
	return metav1.ObjectMeta{
		Namespace: ns, Name: name,
		UID:               types.UID(fmt.Sprintf("%08x-1111-2222-3333-444455556666", len(name)*7919+len(ns))),
		ResourceVersion:   "123456",
		CreationTimestamp: ts,
		Labels:            map[string]string{"app": name, "app.kubernetes.io/part-of": "shop"},
		ManagedFields: []metav1.ManagedFieldsEntry{{
			Manager: manager, Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", Time: &ts,
			FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: raw},
		}},
	}
}

func memObjects() []kruntime.Object {
	var objs []kruntime.Object
	for i := range memServices + memHeadless {
		ns := fmt.Sprintf("ns-%03d", i%memNS)
		name := fmt.Sprintf("svc-%05d", i)
		svc := &corev1.Service{
			ObjectMeta: realisticMeta(ns, name, "kubectl-client-side-apply", 2),
			Spec: corev1.ServiceSpec{
				Ports: []corev1.ServicePort{
					{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP},
					{Name: "grpc", Port: 9090, TargetPort: intstr.FromInt32(9090), Protocol: corev1.ProtocolTCP},
				},
				Selector:              map[string]string{"app": name},
				Type:                  corev1.ServiceTypeClusterIP,
				SessionAffinity:       corev1.ServiceAffinityNone,
				IPFamilies:            []corev1.IPFamily{corev1.IPv4Protocol},
				IPFamilyPolicy:        ptr(corev1.IPFamilyPolicySingleStack),
				InternalTrafficPolicy: ptr(corev1.ServiceInternalTrafficPolicyCluster),
			},
		}
		svc.Annotations = map[string]string{"kubectl.kubernetes.io/last-applied-configuration": fmt.Sprintf(
			`{"apiVersion":"v1","kind":"Service","metadata":{"annotations":{},"labels":{"app":%q,"app.kubernetes.io/part-of":"shop"},"name":%q,"namespace":%q},"spec":{"ports":[{"name":"http","port":80,"targetPort":8080},{"name":"grpc","port":9090}],"selector":{"app":%q}}}`,
			name, name, ns, name)}
		if i < memServices {
			ip := netip.AddrFrom4([4]byte{10, 96, byte(i >> 8), byte(i)}).String()
			svc.Spec.ClusterIP, svc.Spec.ClusterIPs = ip, []string{ip}
			objs = append(objs, svc)
			continue
		}
		svc.Spec.ClusterIP, svc.Spec.ClusterIPs = corev1.ClusterIPNone, []string{corev1.ClusterIPNone}
		objs = append(objs, svc)
		s := &discoveryv1.EndpointSlice{
			ObjectMeta:  realisticMeta(ns, name+"-abcde", "endpointslice-controller.k8s.io", memEPs),
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr("http"), Port: ptr(int32(8080)), Protocol: ptr(corev1.ProtocolTCP)}},
		}
		s.Labels[discoveryv1.LabelServiceName] = name
		s.Labels[discoveryv1.LabelManagedBy] = "endpointslice-controller.k8s.io"
		s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: ts.UTC().Format(time.RFC3339Nano)}
		for e := range memEPs {
			pod := fmt.Sprintf("%s-%d", name, e)
			s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{netip.AddrFrom4([4]byte{10, 1, byte(i >> 4), byte(i<<4 | e)}).String()},
				Conditions: discoveryv1.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
				Hostname:   ptr(pod),
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: pod, UID: types.UID(pod + "-0000-1111-2222-333344445555")},
				NodeName:   ptr(fmt.Sprintf("node-%03d", e)),
				Zone:       ptr("zone-a"),
			})
		}
		objs = append(objs, s)
	}
	return objs
}

// latest is a Sink keeping only the last snapshot, as a registry would.
type latest struct {
	mu   sync.Mutex
	snap registry.Snapshot
	n    int
	ch   chan struct{}
}

func (l *latest) Update(_ string, s registry.Snapshot) {
	l.mu.Lock()
	l.snap = s
	l.n++
	l.mu.Unlock()
	select {
	case l.ch <- struct{}{}:
	default:
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// measureSource returns the heap the source keeps (informer caches,
// entries, the last snapshot) once synced.
func measureSource(t *testing.T, client Client, keepFull bool) (bytes uint64, entries int) {
	src := newSource(t, Config{Client: client})
	src.keepFull = keepFull
	sink := &latest{ch: make(chan struct{}, 1)}
	base := heapAlloc()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, sink) }()
	select {
	case <-sink.ch:
	case <-time.After(2 * time.Minute):
		t.Fatal("no snapshot")
	}
	after := heapAlloc()
	sink.mu.Lock()
	entries = len(sink.snap.Entries)
	sink.mu.Unlock()
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(client)
	return after - base, entries
}

// TestMemory reports the source's heap with and without the informer
// transforms (fake clientset; run with -v for the figures) and fails if
// the transforms stop paying for themselves.
func TestMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 12,000 objects")
	}
	client := typed(fake.NewClientset(memObjects()...))
	slim, full := compareHeaps(t, client)
	// The fake clientset's objects share their strings with its tracker,
	// so "without" undercounts what decoding API responses costs: the
	// real ratio is larger (TestMemoryAPIServer).
	if slim*2 > full {
		t.Errorf("transforms save too little: %d bytes with, %d without", slim, full)
	}
	if slim > 24<<20 {
		t.Errorf("source keeps %.1f MiB, want under 24 MiB", mib(slim))
	}
}

// compareHeaps measures the source with and without transforms and logs
// the figures. The client may hold a few more services (the API server's
// default/kubernetes, other tests').
func compareHeaps(t *testing.T, client Client) (slim, full uint64) {
	slim, n := measureSource(t, client, false)
	if n < memServices+memHeadless || n > memServices+memHeadless+100 {
		t.Fatalf("snapshot has %d entries, want %d (+ a few)", n, memServices+memHeadless)
	}
	full, _ = measureSource(t, client, true)
	t.Logf("kubesource heap, %d services + %d headless x %d endpoints: %.1f MiB with transforms, %.1f MiB without (%.2fx smaller), %d bytes per service",
		memServices, memHeadless, memEPs, mib(slim), mib(full), float64(full)/float64(slim), slim/uint64(n))
	return slim, full
}

// TestMemoryAPIServer is TestMemory against the real API server: the
// objects are written through the API (it adds the managedFields), then
// listed and decoded by the informers as in production. It takes about a
// minute on two cores, so it runs only with MESHDNS_KUBE_MEMORY=1.
func TestMemoryAPIServer(t *testing.T) {
	if os.Getenv("MESHDNS_KUBE_MEMORY") == "" {
		t.Skip("set MESHDNS_KUBE_MEMORY=1 to write 12,000 objects to the API server")
	}
	c := cluster.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	for i := range memNS {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("ns-%03d", i)}}
		if _, err := c.Client.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	begin := time.Now()
	objs := memObjects()
	work := make(chan kruntime.Object)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for o := range work {
				var err error
				switch o := o.(type) {
				case *corev1.Service:
					o.ManagedFields, o.ResourceVersion, o.UID = nil, "", ""
					if o.Spec.ClusterIP != corev1.ClusterIPNone {
						// Let the API server allocate from its range.
						o.Spec.ClusterIP, o.Spec.ClusterIPs = "", nil
					}
					_, err = c.Client.CoreV1().Services(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
				case *discoveryv1.EndpointSlice:
					o.ManagedFields, o.ResourceVersion, o.UID = nil, "", ""
					_, err = c.Client.DiscoveryV1().EndpointSlices(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		})
	}
	for _, o := range objs {
		work <- o
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
	t.Logf("wrote %d objects in %v", len(objs), time.Since(begin).Round(time.Second))
	objs = nil
	client := restClientFor(t, c.Config)
	slim, full := compareHeaps(t, client)
	if slim*3 > full {
		t.Errorf("transforms save too little: %d bytes with, %d without", slim, full)
	}
	measureControlPlane(t, client)
}

// TestMemoryControlPlane runs the whole control plane in-process on the
// same objects and reports its heap once the first version is built (no
// agent connected: per-namespace views come with agents).
func TestMemoryControlPlane(t *testing.T) {
	if testing.Short() {
		t.Skip("builds 12,000 objects")
	}
	measureControlPlane(t, typed(fake.NewClientset(memObjects()...)))
}

// measureControlPlane runs the control plane with a source on client and
// logs its heap once the first version is built.
func measureControlPlane(t *testing.T, client Client) {
	base := heapAlloc()
	src := newSource(t, Config{Client: client})
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cp, err := controlplane.New(controlplane.Config{
		GRPCListener: gl, AdminListener: al, Sources: []registry.Source{src},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- cp.Run(ctx) }()
	testenv.Eventually(t, "the control plane ready", 2*time.Minute, cp.Ready)
	after := heapAlloc()
	names := 0
	if m := cp.Registry().Latest(); m != nil {
		names = len(m.Names)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	runtime.KeepAlive(client)
	t.Logf("control plane heap with the Kubernetes source, %d names: %.1f MiB", names, mib(after-base))
	if names < memServices+memHeadless {
		t.Errorf("registry has %d names, want at least %d", names, memServices+memHeadless)
	}
}

func mib(b uint64) float64 { return float64(b) / (1 << 20) }
