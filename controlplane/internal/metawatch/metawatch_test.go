package metawatch

import (
	"context"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func object(ns, name string, l map[string]string) *metav1.PartialObjectMetadata {
	return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "1",
		Labels: l, Annotations: map[string]string{"big": "x"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}}}
}

// TestWatch: the first list reaches On before Synced, stripped to the
// labels Keep returns; a watched change and a deletion follow; Run
// returns when ctx ends, leaving no goroutine.
func TestWatch(t *testing.T) {
	w := watch.NewFake()
	lw := &cache.ListWatch{
		ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
			return &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: "1"},
				Items: []metav1.PartialObjectMetadata{*object("a", "x", map[string]string{"keep": "1", "drop": "2"})}}, nil
		},
		WatchFunc: func(metav1.ListOptions) (watch.Interface, error) { return w, nil },
	}
	var (
		mu  sync.Mutex
		got []string
	)
	events := make(chan struct{}, 10)
	synced := make(chan struct{})
	on := func(m *metav1.PartialObjectMetadata, gone bool) {
		mu.Lock()
		defer mu.Unlock()
		if m.Annotations != nil || m.ManagedFields != nil {
			t.Errorf("%s/%s kept annotations or managed fields", m.Namespace, m.Name)
		}
		e := m.Namespace + "/" + m.Name + " " + m.Labels["keep"]
		if gone {
			e += " gone"
		}
		select {
		case <-synced:
		default:
			e += " (listed)"
		}
		if _, ok := m.Labels["drop"]; ok {
			e += " unstripped"
		}
		got = append(got, e)
		events <- struct{}{}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Watch{ListWatch: lw, Keep: Label("keep"), On: on, Synced: func() { close(synced) }}.Run(ctx)
	}()
	<-synced
	w.Modify(object("a", "x", map[string]string{"keep": "3"}))
	w.Delete(object("a", "x", map[string]string{"keep": "3"}))
	for range 3 {
		<-events
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	want := []string{"a/x 1 (listed)", "a/x 3", "a/x 3 gone"}
	mu.Lock()
	defer mu.Unlock()
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestHandler: a tombstone is a deletion of its object; anything that is
// not PartialObjectMetadata is ignored.
func TestHandler(t *testing.T) {
	var got []string
	h := Handler(func(m *metav1.PartialObjectMetadata, gone bool) {
		e := m.Name
		if gone {
			e += " gone"
		}
		got = append(got, e)
	})
	h.OnAdd(object("", "a", nil), false)
	h.OnUpdate(nil, cache.DeletedFinalStateUnknown{Key: "b", Obj: object("", "b", nil)})
	h.OnDelete(object("", "c", nil))
	h.OnAdd("junk", false)
	if diff := cmp.Diff([]string{"a", "b gone", "c gone"}, got); diff != "" {
		t.Errorf("calls (-want +got):\n%s", diff)
	}
}

func TestStripKeepsNoLabelsWithoutKeep(t *testing.T) {
	out, _ := Strip(nil)(object("ns", "n", map[string]string{"a": "b"}))
	m := out.(*metav1.PartialObjectMetadata)
	if m.Labels != nil || m.Name != "n" || m.Namespace != "ns" || m.ResourceVersion != "1" {
		t.Errorf("Strip(nil) = %+v", m.ObjectMeta)
	}
}
