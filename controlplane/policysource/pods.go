package policysource

import (
	"context"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// runPods keeps one metadata-only pod watch per namespace where a policy
// selects pods by label (Store.LabelNamespaces), starting and stopping
// watches as policies come and go, until ctx ends. Metadata-only: the API
// server sends each pod's metadata, not its spec and status, and the
// transform keeps only the name and labels.
func (k *Kube) runPods(ctx context.Context) {
	type running struct {
		cancel context.CancelFunc
		done   chan struct{}
	}
	watches := map[string]running{}
	defer func() {
		for _, w := range watches {
			w.cancel()
			<-w.done
		}
	}()
	for {
		want, changed := k.cfg.Store.LabelNamespaces()
		for ns, w := range watches {
			if !slices.Contains(want, ns) {
				w.cancel()
				<-w.done
				delete(watches, ns)
				k.cfg.Store.ForgetPods(ns)
				k.log.Info("pod label watch stopped", "namespace", ns)
			}
		}
		for _, ns := range want {
			if _, ok := watches[ns]; ok {
				continue
			}
			wctx, cancel := context.WithCancel(ctx)
			w := running{cancel: cancel, done: make(chan struct{})}
			watches[ns] = w
			go func() {
				defer close(w.done)
				k.watchPods(wctx, ns)
			}()
			k.log.Info("pod label watch started", "namespace", ns)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
	}
}

// watchPods feeds the labels of namespace ns's pods to the Store until ctx
// ends.
func (k *Kube) watchPods(ctx context.Context, ns string) {
	ri := k.meta.Resource(podsResource).Namespace(ns)
	lw := &cache.ListWatch{
		ListFunc:  func(o metav1.ListOptions) (runtime.Object, error) { return ri.List(ctx, o) },
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) { return ri.Watch(ctx, o) },
	}
	inf := cache.NewSharedIndexInformer(lw, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
	_ = inf.SetTransform(func(obj any) (any, error) {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace,
				UID: m.UID, ResourceVersion: m.ResourceVersion, Labels: m.Labels}}, nil
		}
		return obj, nil
	})
	set := func(obj any) {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			k.cfg.Store.SetPod(ns, m.Name, labels.Set(m.Labels))
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
				k.cfg.Store.SetPod(ns, m.Name, nil)
			}
		},
	}); err != nil {
		k.log.Error("pod label watch", "namespace", ns, "err", err)
		return
	}
	inf.Run(ctx.Done())
}
