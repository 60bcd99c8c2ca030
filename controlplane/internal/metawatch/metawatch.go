// Package metawatch is the control plane's one way to follow a kind of
// Kubernetes object it needs only a few labels of (node zones, namespaces
// that opt in, pod labels): a metadata-only list and watch (the API server
// sends PartialObjectMetadata, never a spec or status), each object cut
// down to its name, namespace, UID, resource version and the labels its
// user keeps before the informer stores it, and one callback for added,
// changed and deleted objects.
package metawatch

import (
	"context"
	"errors"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/cache"
)

// ListWatch lists and watches the metadata of resource through meta, in
// namespace ("" for every namespace), only the objects labelSelector
// selects ("" for all). ctx bounds every list and watch call.
func ListWatch(ctx context.Context, meta metadata.Interface, resource schema.GroupVersionResource, namespace, labelSelector string) *cache.ListWatch {
	var ri metadata.ResourceInterface = meta.Resource(resource)
	if namespace != "" {
		ri = meta.Resource(resource).Namespace(namespace)
	}
	return &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = labelSelector
			return ri.List(ctx, o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = labelSelector
			return ri.Watch(ctx, o)
		},
	}
}

// Watch runs an informer on metadata-only objects.
type Watch struct {
	// ListWatch lists and watches PartialObjectMetadata (ListWatch gives
	// one); required.
	ListWatch cache.ListerWatcher
	// Keep returns the labels kept of an object's; nil keeps none.
	Keep func(labels map[string]string) map[string]string
	// On is called, one call at a time, for each object added or changed
	// (gone false) or deleted (gone true), stripped as Strip does;
	// required.
	On func(m *metav1.PartialObjectMetadata, gone bool)
	// Synced, when set, is called once On has had every object of the
	// first list.
	Synced func()
}

// Run runs the informer until ctx ends; it returns nil then.
func (w Watch) Run(ctx context.Context) error {
	if w.ListWatch == nil || w.On == nil {
		return errors.New("metawatch: ListWatch and On are required")
	}
	inf := cache.NewSharedIndexInformer(w.ListWatch, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
	if err := inf.SetTransform(Strip(w.Keep)); err != nil {
		return fmt.Errorf("metawatch: set transform: %w", err)
	}
	reg, err := inf.AddEventHandler(Handler(w.On))
	if err != nil {
		return fmt.Errorf("metawatch: add handler: %w", err)
	}
	var wg sync.WaitGroup
	if w.Synced != nil {
		wg.Go(func() {
			if cache.WaitForCacheSync(ctx.Done(), reg.HasSynced) {
				w.Synced()
			}
		})
	}
	inf.Run(ctx.Done())
	wg.Wait()
	return nil
}

// Strip returns the informer transform that keeps an object's name,
// namespace, UID, resource version and the labels keep returns (none
// when keep is nil): the rest of the metadata (other labels, annotations,
// managed fields) is most of it, and the informer would hold it for every
// object. Anything else (a tombstone, whose object was stripped before)
// passes as it is.
func Strip(keep func(map[string]string) map[string]string) cache.TransformFunc {
	return func(obj any) (any, error) {
		m, ok := obj.(*metav1.PartialObjectMetadata)
		if !ok {
			return obj, nil
		}
		out := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace,
			UID: m.UID, ResourceVersion: m.ResourceVersion}}
		if keep != nil {
			out.Labels = keep(m.Labels)
		}
		return out, nil
	}
}

// Handler turns the informer's events into calls of on: added and
// changed objects with gone false, deleted ones (a tombstone's object
// included) with gone true. Anything that is not PartialObjectMetadata is
// ignored.
func Handler(on func(m *metav1.PartialObjectMetadata, gone bool)) cache.ResourceEventHandlerFuncs {
	call := func(obj any, gone bool) {
		if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj, gone = t.Obj, true
		}
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			on(m, gone)
		}
	}
	return cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { call(obj, false) },
		UpdateFunc: func(_, obj any) { call(obj, false) },
		DeleteFunc: func(obj any) { call(obj, true) },
	}
}

// Label returns a Keep that keeps the label key only, when the object
// has it.
func Label(key string) func(map[string]string) map[string]string {
	return func(l map[string]string) map[string]string {
		if v, ok := l[key]; ok {
			return map[string]string{key: v}
		}
		return nil
	}
}

// AllLabels is a Keep that keeps every label.
func AllLabels(l map[string]string) map[string]string { return l }
