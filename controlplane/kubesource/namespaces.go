package kubesource

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// NamespaceClient is a Client that also lists and watches Namespaces,
// which Options.NamespaceLabels needs. The production client is one.
type NamespaceClient interface {
	Client
	// Namespaces lists and watches core/v1 Namespaces.
	Namespaces() cache.ListerWatcher
}

var _ NamespaceClient = (*restClient)(nil)

func (c *restClient) Namespaces() cache.ListerWatcher {
	return cache.NewFilteredListWatchFromClient(c.core, "namespaces", metav1.NamespaceAll, func(*metav1.ListOptions) {})
}

// newNamespaceWatch creates (but does not start) the informer of the
// namespaces matching Options.NamespaceLabels, or returns nil without the
// option. The label selector goes to the API server, so the cache holds
// only exposed namespaces, as names: a namespace whose labels stop (or
// start) matching arrives as a delete (or an add), and each marks every
// service of the namespace for a rebuild.
func (s *Source) newNamespaceWatch(watches map[string]*informers) (cache.SharedIndexInformer, error) {
	if s.cfg.NamespaceLabels == "" {
		return nil, nil
	}
	lw := withLabelSelector(s.cfg.Client.(NamespaceClient).Namespaces(), s.cfg.NamespaceLabels)
	inf := cache.NewSharedIndexInformer(lw, &corev1.Namespace{}, 0, cache.Indexers{})
	if err := inf.SetTransform(func(obj any) (any, error) {
		if n, ok := obj.(*corev1.Namespace); ok {
			return &metav1.ObjectMeta{Name: n.Name}, nil
		}
		return obj, nil
	}); err != nil {
		return nil, fmt.Errorf("kubesource: set namespace transform: %w", err)
	}
	markAll := func(obj any) {
		key := serviceKey(obj) // a namespace's key is its name
		now := s.cfg.Now()
		for _, w := range watches {
			for _, k := range w.svc.GetIndexer().ListKeys() {
				if strings.HasPrefix(k, key+"/") {
					s.mark(k, now)
				}
			}
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    markAll,
		DeleteFunc: markAll,
	}); err != nil {
		return nil, fmt.Errorf("kubesource: namespace handler: %w", err)
	}
	s.namespaces = inf
	return inf, nil
}

// namespaceExposed reports whether ns matches Options.NamespaceLabels (or
// the option is off).
func (s *Source) namespaceExposed(ns string) bool {
	if s.namespaces == nil {
		return true
	}
	_, ok, _ := s.namespaces.GetIndexer().GetByKey(ns)
	return ok
}

// waitForSync waits until every informer has synced, as
// cache.WaitForCacheSync, and reports false if ctx ended first. With
// Options.StartupTimeout, a wait longer than it first sends what the
// caches hold (sendPartial).
func (s *Source) waitForSync(ctx context.Context, partial func(), synced []cache.InformerSynced) bool {
	if s.cfg.StartupTimeout <= 0 {
		return cache.WaitForCacheSync(ctx.Done(), synced...)
	}
	tctx, cancel := context.WithTimeout(ctx, s.cfg.StartupTimeout)
	ok := cache.WaitForCacheSync(tctx.Done(), synced...)
	cancel()
	if ok || ctx.Err() != nil {
		return ok
	}
	partial()
	return cache.WaitForCacheSync(ctx.Done(), synced...)
}
