package forwardsource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

var podsResource = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// Pods keeps the labels of every pod, from a metadata-only watch (the API
// server sends each pod's metadata, not its spec and status, and only the
// name and labels are kept: about 200 bytes a pod), for rules that select
// pods by label. File runs it when FileConfig.Pods is set.
type Pods struct {
	meta metadata.Interface
	log  *slog.Logger

	mu      sync.RWMutex          // guards following
	labels  map[string]labels.Set // by namespace/name
	changed func()                // called after a pod's labels changed; set by File
	synced  chan struct{}         // closed once the first list is in
}

// NewPods returns a pod label cache reading through rc; Run fills it.
func NewPods(rc *rest.Config, log *slog.Logger) (*Pods, error) {
	if rc == nil {
		return nil, errors.New("forwardsource: pods need a REST config")
	}
	meta, err := metadata.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("forwardsource: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Pods{meta: meta, log: log, labels: map[string]labels.Set{}, synced: make(chan struct{})}, nil
}

// Labels returns the labels of pod namespace/name, and false when the pod
// is not known (yet).
func (p *Pods) Labels(namespace, name string) (labels.Set, bool) {
	p.mu.RLock()
	defer p.mu.RUnlock()
	l, ok := p.labels[namespace+"/"+name]
	return l, ok
}

// Synced is closed once the first list of pods is in.
func (p *Pods) Synced() <-chan struct{} { return p.synced }

// Run watches the pods until ctx ends.
func (p *Pods) Run(ctx context.Context) error {
	ri := p.meta.Resource(podsResource)
	lw := &cache.ListWatch{
		ListFunc:  func(o metav1.ListOptions) (runtime.Object, error) { return ri.List(ctx, o) },
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) { return ri.Watch(ctx, o) },
	}
	inf := cache.NewSharedIndexInformer(lw, &metav1.PartialObjectMetadata{}, 0, cache.Indexers{})
	_ = inf.SetTransform(func(obj any) (any, error) {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			return &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace,
				ResourceVersion: m.ResourceVersion, Labels: m.Labels}}, nil
		}
		return obj, nil
	})
	set := func(obj any, gone bool) {
		if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
			obj, gone = d.Obj, true
		}
		m, ok := obj.(*metav1.PartialObjectMetadata)
		if !ok {
			return
		}
		key := m.Namespace + "/" + m.Name
		p.mu.Lock()
		old, had := p.labels[key]
		if gone {
			delete(p.labels, key)
		} else {
			p.labels[key] = labels.Set(m.Labels)
		}
		moved := had
		if !gone {
			moved = !had || !maps.Equal(old, labels.Set(m.Labels))
		}
		changed := p.changed
		p.mu.Unlock()
		if moved && changed != nil {
			changed()
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { set(obj, false) },
		UpdateFunc: func(_, obj any) { set(obj, false) },
		DeleteFunc: func(obj any) { set(obj, true) },
	}); err != nil {
		return fmt.Errorf("forwardsource: pod watch: %w", err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			close(p.synced)
		}
	})
	inf.Run(ctx.Done())
	wg.Wait()
	return nil
}

// onChange sets the function called after a pod's labels changed.
func (p *Pods) onChange(f func()) {
	p.mu.Lock()
	p.changed = f
	p.mu.Unlock()
}
