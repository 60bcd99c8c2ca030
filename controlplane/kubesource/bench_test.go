package kubesource

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshdns/meshdns/controlplane/registry"
)

// discard is a Sink that drops snapshots.
type discard struct{}

func (discard) Update(string, registry.Snapshot) {}

// benchSource fills a source's (unstarted) informer caches with the memory
// test's objects, transformed, and builds every entry once.
func benchSource(b *testing.B) (*Source, map[string]*informers, *entrySet) {
	b.Helper()
	s := newSource(b, Config{Client: typed(fake.NewClientset())})
	w, err := s.newWatch(metav1.NamespaceAll)
	if err != nil {
		b.Fatal(err)
	}
	for _, o := range memObjects() {
		switch o := o.(type) {
		case *corev1.Service:
			slim, _ := transformService(o)
			_ = w.svc.GetIndexer().Add(slim)
		case *discoveryv1.EndpointSlice:
			slim, _ := transformEndpointSlice(o)
			_ = w.eps.GetIndexer().Add(slim)
		}
	}
	watches := map[string]*informers{metav1.NamespaceAll: w}
	entries := newEntrySet()
	for _, key := range w.svc.GetIndexer().ListKeys() {
		s.rebuild(entries, watches, "", key)
	}
	return s, watches, entries
}

// BenchmarkChangeOneService is the work of one coalescing tick at the
// memory test's scale (11,000 services) when one headless service of 10
// endpoints changed: rebuild it, then assemble and sort the snapshot.
func BenchmarkChangeOneService(b *testing.B) {
	s, watches, entries := benchSource(b)
	key := "ns-050/svc-10050" // a headless service
	b.ReportAllocs()
	for b.Loop() {
		entries.remove(key) // force "changed"
		s.rebuild(entries, watches, "ns-050", key)
		s.send(discard{}, entries, ts.Time)
	}
}

// BenchmarkRebuildHeadless is buildEntry alone for a headless service of
// 10 endpoints.
func BenchmarkRebuildHeadless(b *testing.B) {
	s, watches, entries := benchSource(b)
	key := "ns-050/svc-10050"
	b.ReportAllocs()
	for b.Loop() {
		s.rebuild(entries, watches, "ns-050", key)
	}
}

// BenchmarkTransformService is the per-object cost of the Service
// transform on a kubectl-applied Service.
func BenchmarkTransformService(b *testing.B) {
	svc := memObjects()[0].(*corev1.Service)
	b.ReportAllocs()
	for b.Loop() {
		_, _ = transformService(svc)
	}
}
