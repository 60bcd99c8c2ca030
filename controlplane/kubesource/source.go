// Package kubesource is the control plane's Kubernetes source: it watches
// Services and EndpointSlices (discovery.k8s.io/v1) with client-go
// informers and hands the registry one entry per Service, named
// svc.ns.svc.<cluster domain>, following the Kubernetes DNS specification.
//
// The cluster domain is reported as a zone the source is complete for only
// once every informer has synced, so agents never answer NXDOMAIN for a
// service the source has not listed yet.
package kubesource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/meshdns/meshdns/controlplane/internal/deps"
	"github.com/meshdns/meshdns/controlplane/registry"
)

// Config configures a Source.
type Config struct {
	// Client lists and watches the API server (NewClient,
	// NewClientForConfig). Required.
	Client Client
	// Namespaces to watch; empty means every namespace. Each namespace
	// gets its own pair of watches.
	Namespaces []string
	// LabelSelector limits the Services watched (label query syntax, as
	// kubectl -l); empty means all. EndpointSlices are matched to watched
	// Services by their kubernetes.io/service-name label.
	LabelSelector string
	// ClusterDomain is the zone names are built in; zero means
	// "cluster.local".
	ClusterDomain string
	// Name is the source name given to the sink; zero means "kubernetes".
	Name string
	// Coalesce is how long the source gathers further events after one
	// arrives before it rebuilds the changed services and sends a
	// snapshot; zero means 20ms. The registry debounces again across
	// sources; this only keeps a burst from costing a snapshot per event.
	Coalesce time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer for the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Now is the clock used for event receipt times; nil means time.Now.
	Now func() time.Time
	// Options are CoreDNS's kubernetes plugin options (options.go).
	Options
}

// Source is the Kubernetes source. It satisfies registry.Source.
type Source struct {
	cfg Config
	log *slog.Logger
	m   *metrics

	mu      sync.Mutex          // guards following
	dirty   map[string]struct{} // service keys (ns/name) changed since the last rebuild
	changed time.Time           // earliest change time among dirty; zero if unknown

	kick chan struct{} // capacity 1: "dirty is not empty"

	// keepFull turns the informer transforms off; the memory test sets it
	// to measure what the transforms save.
	keepFull bool
	// namespaces, or nil, caches the namespaces Options.NamespaceLabels
	// exposes; set by Run before the first rebuild.
	namespaces cache.SharedIndexInformer
	// rebuilt, or nil, is called by Run after each coalesced rebuild with
	// the service keys it looked at, their earliest change time and
	// whether it sent a snapshot, so tests learn that a change was handled
	// without sleeping.
	rebuilt func(keys []string, changed time.Time, sent bool)
}

var _ registry.Source = (*Source)(nil)

// indexService indexes EndpointSlices by the ns/name key of their Service.
const indexService = "service"

// New returns a source; Run starts the watches.
func New(cfg Config) (*Source, error) {
	if cfg.Client == nil {
		return nil, errors.New("kubesource: no client")
	}
	if _, err := labels.Parse(cfg.LabelSelector); err != nil {
		return nil, fmt.Errorf("kubesource: label selector %q: %w", cfg.LabelSelector, err)
	}
	if err := cfg.Options.validate(cfg); err != nil {
		return nil, err
	}
	cfg.ClusterDomain = strings.ToLower(strings.Trim(cfg.ClusterDomain, "."))
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = "cluster.local"
	}
	ns := slices.Clone(cfg.Namespaces)
	slices.Sort(ns)
	cfg.Namespaces = slices.Compact(ns)
	if slices.Contains(cfg.Namespaces, "") {
		cfg.Namespaces = nil // "" is every namespace, which covers the rest
	}
	if cfg.Name == "" {
		cfg.Name = "kubernetes"
	}
	if cfg.Coalesce <= 0 {
		cfg.Coalesce = 20 * time.Millisecond
	}
	cfg.Now = deps.Now(cfg.Now)
	log := deps.Logger(cfg.Logger)
	reg := deps.Registerer(cfg.Registerer)
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("kubesource metrics: %w", err)
	}
	return &Source{
		cfg:   cfg,
		log:   log.With("source", cfg.Name),
		m:     m,
		dirty: map[string]struct{}{},
		kick:  make(chan struct{}, 1),
	}, nil
}

// Name is the source name passed to the sink.
func (s *Source) Name() string { return s.cfg.Name }

// informers is the pair of informers for one namespace ("" for all).
type informers struct {
	svc cache.SharedIndexInformer
	eps cache.SharedIndexInformer
}

// Run watches until ctx ends. It sends the first snapshot, with the
// cluster zone, once the informers have synced, and another after each
// burst of changes that alters an answer. It returns nil when ctx ends.
func (s *Source) Run(ctx context.Context, sink registry.Sink) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // runs before wg.Wait: the informers stop, then we wait

	watches := map[string]*informers{}
	namespaces := s.cfg.Namespaces
	if len(namespaces) == 0 {
		namespaces = []string{metav1.NamespaceAll}
	}
	var synced []cache.InformerSynced
	for _, ns := range namespaces {
		w, err := s.newWatch(ns)
		if err != nil {
			return err
		}
		watches[ns] = w
		infs := []cache.SharedIndexInformer{w.svc, w.eps}
		if s.cfg.NoEndpoints {
			infs = infs[:1] // the slice cache stays empty
		}
		for _, inf := range infs {
			synced = append(synced, inf.HasSynced)
			wg.Go(func() { inf.Run(ctx.Done()) })
		}
	}
	nsInf, err := s.newNamespaceWatch(watches)
	if err != nil {
		return err
	}
	if nsInf != nil {
		synced = append(synced, nsInf.HasSynced)
		wg.Go(func() { nsInf.Run(ctx.Done()) })
	}
	s.log.Info("waiting for informers to sync", "namespaces", s.cfg.Namespaces, "selector", s.cfg.LabelSelector)
	if !s.waitForSync(ctx, func() { s.sendPartial(sink, watches) }, synced) {
		return nil // ctx ended first
	}
	s.m.synced.Set(1)

	// Everything is built once now; events of the initial list are folded
	// into this build.
	s.takeDirty()
	entries := newEntrySet()
	for ns, w := range watches {
		for _, key := range w.svc.GetIndexer().ListKeys() {
			s.rebuild(entries, watches, ns, key)
		}
	}
	s.send(sink, entries, time.Time{})
	s.log.Info("informers synced", "services", entries.len(), "zone", s.cfg.ClusterDomain)

	coalesce := time.NewTimer(time.Hour)
	coalesce.Stop()
	pending := false
	for {
		select {
		case <-ctx.Done():
			coalesce.Stop()
			return nil
		case <-s.kick:
			if !pending {
				pending = true
				coalesce.Reset(s.cfg.Coalesce)
			}
		case <-coalesce.C:
			pending = false
			start := time.Now()
			keys, changed := s.takeDirty()
			diff := false
			for _, key := range keys {
				ns, _, _ := strings.Cut(key, "/")
				if s.rebuild(entries, watches, ns, key) {
					diff = true
				}
			}
			if diff {
				s.send(sink, entries, changed)
			}
			s.m.rebuild.Observe(time.Since(start).Seconds())
			if s.rebuilt != nil {
				s.rebuilt(keys, changed, diff)
			}
		}
	}
}

// newWatch creates (but does not start) the informers for namespace ns.
func (s *Source) newWatch(ns string) (*informers, error) {
	client := s.cfg.Client
	svc := cache.NewSharedIndexInformer(withLabelSelector(client.Services(ns), s.cfg.LabelSelector),
		&corev1.Service{}, 0, cache.Indexers{})
	// Only slices owned by a Service: the label is set by the
	// EndpointSlice controller and by anyone who writes slices by hand for
	// a selectorless Service.
	req, err := labels.NewRequirement(discoveryv1.LabelServiceName, selection.Exists, nil)
	if err != nil {
		return nil, err
	}
	sliceSel := labels.NewSelector().Add(*req).String()
	eps := cache.NewSharedIndexInformer(withLabelSelector(client.EndpointSlices(ns), sliceSel),
		&discoveryv1.EndpointSlice{}, 0, cache.Indexers{indexService: sliceServiceIndex})

	for _, err := range []error{
		svc.SetTransform(s.transform(transformService)),
		eps.SetTransform(s.transform(s.sliceTransform())),
	} {
		if err != nil {
			return nil, fmt.Errorf("kubesource: set transform: %w", err)
		}
	}
	if _, err := svc.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			t := s.eventTime(initial) // first: the receipt time
			s.m.events.WithLabelValues("service", "add").Inc()
			s.mark(serviceKey(obj), t)
		},
		UpdateFunc: func(_, obj any) {
			s.m.events.WithLabelValues("service", "update").Inc()
			s.mark(serviceKey(obj), s.cfg.Now())
		},
		DeleteFunc: func(obj any) {
			s.m.events.WithLabelValues("service", "delete").Inc()
			s.mark(serviceKey(obj), s.cfg.Now())
		},
	}); err != nil {
		return nil, fmt.Errorf("kubesource: service handler: %w", err)
	}
	if _, err := eps.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			s.m.events.WithLabelValues("endpointslice", "add").Inc()
			t := s.eventTime(initial)
			if !initial {
				t = triggerTime(nil, obj, t)
			}
			s.mark(sliceServiceKey(obj), t)
		},
		UpdateFunc: func(old, obj any) {
			s.m.events.WithLabelValues("endpointslice", "update").Inc()
			// A slice that moved to another service (relabelled) changes
			// both.
			if k := sliceServiceKey(old); k != sliceServiceKey(obj) {
				s.mark(k, s.cfg.Now())
			}
			s.mark(sliceServiceKey(obj), triggerTime(old, obj, s.cfg.Now()))
		},
		DeleteFunc: func(obj any) {
			s.m.events.WithLabelValues("endpointslice", "delete").Inc()
			s.mark(sliceServiceKey(obj), s.cfg.Now())
		},
	}); err != nil {
		return nil, fmt.Errorf("kubesource: endpointslice handler: %w", err)
	}
	return &informers{svc: svc, eps: eps}, nil
}

// withLabelSelector returns lw listing and watching only the objects
// matching selector (label query syntax; empty: all).
func withLabelSelector(lw cache.ListerWatcher, selector string) cache.ListerWatcher {
	return &cache.ListWatch{
		ListFunc: func(o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = selector
			return lw.List(o)
		},
		WatchFunc: func(o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = selector
			return lw.Watch(o)
		},
	}
}

func (s *Source) transform(f cache.TransformFunc) cache.TransformFunc {
	if s.keepFull {
		return nil
	}
	return f
}

// eventTime is when a change happened as far as the source can tell: the
// receipt of its watch event (the API server delivers watch events within
// milliseconds of accepting the write). Objects of the initial list have
// no meaningful change time (they may be months old), so they get zero
// and do not feed the programming latency.
func (s *Source) eventTime(initial bool) time.Time {
	if initial {
		return time.Time{}
	}
	return s.cfg.Now()
}

// triggerTime returns the endpoints.kubernetes.io/last-change-trigger-time
// of a slice when this event changed it (the EndpointSlice controller
// stamps the time of the Pod or Service change that caused the write, the
// start of Kubernetes' own network programming latency SLI), else
// fallback. The annotation is read only when it changed, as kube-proxy
// does: an unrelated update keeps the old stamp.
func triggerTime(old, obj any, fallback time.Time) time.Time {
	v := sliceTriggerTime(obj)
	if v == "" || (old != nil && sliceTriggerTime(old) == v) {
		return fallback
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil || t.After(fallback) {
		return fallback // unparsable, or a clock ahead of ours
	}
	return t
}

func sliceTriggerTime(obj any) string {
	if s := asEndpointSlice(obj); s != nil {
		return s.triggerTime
	}
	return ""
}

// mark records that the service key changed at t (zero: unknown).
func (s *Source) mark(key string, t time.Time) {
	if key == "" {
		return
	}
	s.mu.Lock()
	s.dirty[key] = struct{}{}
	if !t.IsZero() && (s.changed.IsZero() || t.Before(s.changed)) {
		s.changed = t
	}
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// takeDirty returns and clears the changed keys and their earliest change.
func (s *Source) takeDirty() ([]string, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]string, 0, len(s.dirty))
	for k := range s.dirty {
		keys = append(keys, k)
	}
	changed := s.changed
	s.dirty = map[string]struct{}{}
	s.changed = time.Time{}
	return keys, changed
}

// rebuild recomputes the entry of one service into entries and reports
// whether its answers changed.
func (s *Source) rebuild(entries *entrySet, watches map[string]*informers, ns, key string) bool {
	w := watches[ns]
	if w == nil {
		w = watches[metav1.NamespaceAll]
	}
	old, had := entries.get(key)
	var svc *service
	if w != nil {
		if obj, ok, _ := w.svc.GetIndexer().GetByKey(key); ok {
			svc = asService(obj)
		}
	}
	if svc == nil {
		return entries.remove(key)
	}
	var eps []*endpointSlice
	if objs, err := w.eps.GetIndexer().ByIndex(indexService, key); err == nil {
		for _, o := range objs {
			if e := asEndpointSlice(o); e != nil {
				eps = append(eps, e)
			}
		}
	}
	e, bad, ok := buildEntry(svc, eps, s.cfg.ClusterDomain)
	if len(bad) > 0 {
		s.m.annotations.Inc()
		s.log.Warn("ignoring invalid namespaces in annotation", "service", key, "annotation", AnnotationExportTo, "values", bad)
	}
	if !ok || s.hidden(svc, eps) {
		return entries.remove(key)
	}
	if had && sameEntry(old, e) {
		return false // keep the old entry: nothing DNS shows changed
	}
	entries.set(key, e)
	return true
}

// send hands the registry a new snapshot of all entries, in ns/name order
// so equal states give equal snapshots.
func (s *Source) send(sink registry.Sink, entries *entrySet, changed time.Time) {
	out := entries.snapshot()
	sink.Update(s.cfg.Name, registry.Snapshot{Entries: out, Zones: s.zones(), Changed: changed})
	s.m.snapshots.Inc()
	s.m.entries.Set(float64(len(out)))
}

// serviceKey is the ns/name key of a Service event's object.
func serviceKey(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Key
	}
	k, err := cache.MetaNamespaceKeyFunc(obj)
	if err != nil {
		return ""
	}
	return k
}

// sliceServiceKey is the ns/name key of the Service an EndpointSlice event
// belongs to, or "" without the service-name label.
func sliceServiceKey(obj any) string {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	var ns, name string
	switch s := obj.(type) {
	case *endpointSlice:
		ns, name = s.namespace, s.serviceName
	case *discoveryv1.EndpointSlice: // transforms off (memory test)
		ns, name = s.Namespace, s.Labels[discoveryv1.LabelServiceName]
	}
	if name == "" {
		return ""
	}
	return ns + "/" + name
}

func sliceServiceIndex(obj any) ([]string, error) {
	if k := sliceServiceKey(obj); k != "" {
		return []string{k}, nil
	}
	return nil, nil
}
