// Package mcssource is the control plane's source of multi-cluster names:
// it watches the MCS API's ServiceImports (multicluster.x-k8s.io/v1alpha1)
// and the EndpointSlices labelled for them, and hands the registry
// <svc>.<ns>.svc.clusterset.local entries as the MCS DNS specification
// says.
//
// The zone is reported as one the source is complete for only while the
// ServiceImport CRD is installed and its informers have synced: without
// the CRD, clusterset.local is not authoritative here and agents forward
// its names to the cluster DNS.
package mcssource

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/client-go/tools/cache"

	"github.com/meshdns/meshdns/controlplane/internal/deps"
	"github.com/meshdns/meshdns/controlplane/registry"
)

// Config configures a Source.
type Config struct {
	// Client reaches the API server (NewClientForConfig). Required.
	Client Client
	// Zone is the clusterset zone; zero means "clusterset.local".
	Zone string
	// Name is the source name given to the sink; zero means
	// "multicluster".
	Name string
	// Recheck is how often the source asks the API server whether the
	// ServiceImport CRD is installed; zero means 10s.
	Recheck time.Duration
	// Coalesce is how long the source gathers further events after one
	// arrives before it rebuilds; zero means 20ms.
	Coalesce time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer for the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
}

// Source is the multi-cluster source. It satisfies registry.Source.
type Source struct {
	cfg  Config
	log  *slog.Logger
	m    *metrics
	kick chan struct{} // capacity 1: an informer saw an event
}

var _ registry.Source = (*Source)(nil)

// indexService indexes EndpointSlices by the ns/name of their import.
const indexService = "service"

// New returns a source; Run starts it.
func New(cfg Config) (*Source, error) {
	if cfg.Client == nil {
		return nil, errors.New("mcssource: no client")
	}
	cfg.Zone = strings.ToLower(strings.Trim(cfg.Zone, "."))
	if cfg.Zone == "" {
		cfg.Zone = "clusterset.local"
	}
	if cfg.Name == "" {
		cfg.Name = "multicluster"
	}
	if cfg.Recheck <= 0 {
		cfg.Recheck = 10 * time.Second
	}
	if cfg.Coalesce <= 0 {
		cfg.Coalesce = 20 * time.Millisecond
	}
	m, err := newMetrics(deps.Registerer(cfg.Registerer))
	if err != nil {
		return nil, fmt.Errorf("mcssource metrics: %w", err)
	}
	return &Source{cfg: cfg, log: deps.Logger(cfg.Logger).With("source", cfg.Name), m: m, kick: make(chan struct{}, 1)}, nil
}

// Name is the source name passed to the sink.
func (s *Source) Name() string { return s.cfg.Name }

// Run follows the CRD until ctx ends. It reports an empty snapshot without
// the zone at once (so the control plane's first version never waits on a
// CRD that may never come, or on a list RBAC forbids), the zone with the
// imports once the CRD is there and the informers have synced, and the
// empty zoneless snapshot again when the CRD goes away.
func (s *Source) Run(ctx context.Context, sink registry.Sink) error {
	s.sendEmpty(sink)
	tick := time.NewTicker(s.cfg.Recheck)
	defer tick.Stop()
	for {
		present, err := s.cfg.Client.Present(ctx)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			s.log.Warn("cannot tell whether ServiceImports are served", "err", err)
		case present:
			s.m.present.Set(1)
			s.log.Info("ServiceImport CRD found: watching imports", "zone", s.cfg.Zone)
			s.watch(ctx, sink, tick.C)
			if ctx.Err() != nil {
				return nil
			}
			s.m.present.Set(0)
			s.log.Info("ServiceImport CRD gone", "zone", s.cfg.Zone)
			s.sendEmpty(sink)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// watch runs the informers until ctx ends or the CRD is gone (asked at
// each recheck).
func (s *Source) watch(ctx context.Context, sink registry.Sink, recheck <-chan time.Time) {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	imports := cache.NewSharedIndexInformer(s.cfg.Client.ServiceImports(), &unstructured.Unstructured{}, 0, cache.Indexers{})
	req, err := labels.NewRequirement(LabelServiceName, selection.Exists, nil)
	if err != nil {
		panic(err) // a constant label key
	}
	slices := cache.NewSharedIndexInformer(s.cfg.Client.EndpointSlices(labels.NewSelector().Add(*req).String()),
		&unstructured.Unstructured{}, 0, cache.Indexers{indexService: sliceServiceIndex})
	poke := func(any) {
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
	handler := cache.ResourceEventHandlerFuncs{AddFunc: poke, UpdateFunc: func(_, o any) { poke(o) }, DeleteFunc: poke}
	for _, inf := range []cache.SharedIndexInformer{imports, slices} {
		if err := inf.SetTransform(transformFor(inf == imports)); err != nil {
			s.log.Error("set transform", "err", err)
			return
		}
		if _, err := inf.AddEventHandler(handler); err != nil {
			s.log.Error("add handler", "err", err)
			return
		}
		wg.Go(func() { inf.Run(ctx.Done()) })
	}

	gone := func() bool {
		present, err := s.cfg.Client.Present(ctx)
		return err == nil && !present // an error keeps what we have
	}
	// Wait for the sync, giving up when the CRD disappears meanwhile (the
	// lists would fail forever).
	for !imports.HasSynced() || !slices.HasSynced() {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		case <-recheck:
			if gone() {
				return
			}
		case <-time.After(100 * time.Millisecond): // HasSynced has no channel
		}
	}
	s.m.synced.Set(1)
	defer s.m.synced.Set(0)
	var last []registry.Entry
	send := func() {
		out := s.build(imports, slices)
		if last != nil && reflect.DeepEqual(out, last) {
			return
		}
		last = out
		sink.Update(s.cfg.Name, registry.Snapshot{Entries: out, Zones: []string{s.cfg.Zone}})
		s.m.snapshots.Inc()
		s.m.imports.Set(float64(len(imports.GetIndexer().ListKeys())))
	}
	send()
	s.log.Info("ServiceImports synced", "imports", len(imports.GetIndexer().ListKeys()))
	coalesce := time.NewTimer(time.Hour)
	coalesce.Stop()
	defer coalesce.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
			coalesce.Reset(s.cfg.Coalesce)
		case <-coalesce.C:
			send()
		case <-recheck:
			if gone() {
				return
			}
		}
	}
}

// build converts every import in the caches, in ns/name order so equal
// states give equal snapshots.
func (s *Source) build(imports, slices cache.SharedIndexInformer) []registry.Entry {
	keys := imports.GetIndexer().ListKeys()
	sort.Strings(keys)
	out := []registry.Entry{}
	for _, key := range keys {
		obj, ok, _ := imports.GetIndexer().GetByKey(key)
		imp, _ := obj.(*serviceImport)
		if !ok || imp == nil {
			continue
		}
		var eps []*endpointSlice
		objs, _ := slices.GetIndexer().ByIndex(indexService, key)
		for _, o := range objs {
			if e, ok := o.(*endpointSlice); ok {
				eps = append(eps, e)
			}
		}
		out = append(out, buildEntries(imp, eps, s.cfg.Zone)...)
	}
	return out
}

func (s *Source) sendEmpty(sink registry.Sink) {
	sink.Update(s.cfg.Name, registry.Snapshot{})
	s.m.snapshots.Inc()
	s.m.imports.Set(0)
}

func transformFor(imports bool) cache.TransformFunc {
	if imports {
		return transformImport
	}
	return transformSlice
}

func sliceServiceIndex(obj any) ([]string, error) {
	if s, ok := obj.(*endpointSlice); ok && s.serviceName != "" {
		return []string{s.meta.Namespace + "/" + s.serviceName}, nil
	}
	return nil, nil
}
