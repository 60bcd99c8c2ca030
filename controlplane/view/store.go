// Package view turns registry models into per-agent tables. Agents with the
// same namespace and cluster domain share one view, so each new version is
// built and encoded once per view however many agents use it. A view keeps
// a bounded history of versions so a reconnecting agent gets a delta from
// the version it reports.
package view

import (
	"context"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshdns/meshdns/controlplane/internal/deps"
	"github.com/meshdns/meshdns/controlplane/registry"
)

// Key identifies a view: what an agent may see depends only on these.
type Key struct {
	Namespace string
	// ClusterDomain of the agent; empty means the control plane's.
	ClusterDomain string
}

func (k Key) String() string { return k.Namespace + "/" + k.ClusterDomain }

// Config configures a Store.
type Config struct {
	// ClusterDomain is the control plane's cluster domain, in which the
	// sources name Kubernetes services; zero means "cluster.local".
	ClusterDomain string
	// History is how many versions each view keeps for resuming agents;
	// zero means 16.
	History int
	// IdleTTL is how long a view without agents is kept (and updated) so
	// agents reconnecting after a blip still get deltas; zero means 10m.
	IdleTTL time.Duration
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer for the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Models is where a store gets models from; *registry.Registry is one.
type Models interface {
	Subscribe() <-chan struct{}
	Latest() *registry.Model
}

// Store holds the views.
type Store struct {
	cfg Config
	log *slog.Logger
	enc *encoder

	ready     chan struct{} // closed after the first model
	readyOnce sync.Once

	mu    sync.Mutex // guards following
	model *registry.Model
	views map[Key]*View
	ns    namespaces // namespaces the model names (namespaces.go)
}

// View is the table series of one Key.
type View struct {
	key Key
	enc *encoder

	// model is the registry model the view reflects; only touched while
	// Store.mu is held (by Apply, one worker per view, or Subscribe).
	model uint64

	// cur is the current version; written with mu held, read without it
	// (every agent of the view reads it on each version).
	cur atomic.Pointer[Version]
	// prev is the version cur replaced, or nil: the one agents are held
	// at while cur is quarantined (Previous). Keeping it costs what
	// differs between the two tables, as versions share their names.
	prev atomic.Pointer[Version]

	mu        sync.Mutex // guards following
	steps     []*step    // oldest first; the last made cur
	subs      map[*Sub]struct{}
	idleSince time.Time
}

// step records how one version of a view came from the one before: only
// the names that changed, with their old entries. The history is a log of
// steps rather than of whole tables, so keeping 16 versions of a 10,000
// name view costs the changed names, not 16 maps of 10,000. A delta from
// any logged version to a later one is composed from the steps between.
type step struct {
	id    string   // the version this step produced
	zones []string // that version's zones
	// before maps each name the step changed to its entry in the previous
	// version (nil: the name did not exist). Nil for the first step.
	before map[string]*registry.Candidate
}

// Sub is one agent's subscription to its view.
type Sub struct {
	view      *View
	namespace string // the namespace subscribed for (the view's, or Shared's member)
	// notify is called when the view has a new current version or the
	// subscription must be rebound; or nil.
	notify func()
	closed atomic.Bool
	rebind atomic.Bool // see Rebind
}

// New returns an empty store; Run feeds it.
func New(cfg Config) (*Store, error) {
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = "cluster.local"
	}
	cfg.ClusterDomain = registry.CanonicalHost(cfg.ClusterDomain)
	if cfg.History <= 0 {
		cfg.History = 16
	}
	if cfg.IdleTTL <= 0 {
		cfg.IdleTTL = 10 * time.Minute
	}
	cfg.Now = deps.Now(cfg.Now)
	log := deps.Logger(cfg.Logger)
	reg := deps.Registerer(cfg.Registerer)
	enc, err := newEncoder(reg)
	if err != nil {
		return nil, fmt.Errorf("view metrics: %w", err)
	}
	return &Store{cfg: cfg, log: log, enc: enc, ready: make(chan struct{}), views: map[Key]*View{}}, nil
}

// Run applies every model src publishes until ctx ends.
func (s *Store) Run(ctx context.Context, src Models) error {
	ch := src.Subscribe()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-ch:
			if m := src.Latest(); m != nil {
				s.Apply(m)
			}
		}
	}
}

// Ready is closed once the store has a model; agents wait for it rather
// than get an empty table.
func (s *Store) Ready() <-chan struct{} { return s.ready }

// Apply builds the new version of every view from m and queues it to the
// view's subscribers. Views whose table did not change get nothing.
func (s *Store) Apply(m *registry.Model) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.model != nil && m.Version <= s.model.Version {
		return
	}
	added := s.ns.apply(s.model, m)
	s.model = m
	now := s.cfg.Now()
	var live []*View
	for key, v := range s.views {
		v.mu.Lock()
		idle := len(v.subs) == 0 && now.Sub(v.idleSince) > s.cfg.IdleTTL
		v.mu.Unlock()
		if idle {
			delete(s.views, key)
			continue
		}
		live = append(live, v)
	}
	// Views are independent: build them on every core, so a cluster with
	// many namespaces does not hold new subscribers for the sum of them.
	var wg sync.WaitGroup
	work := make(chan *View)
	for range min(runtime.GOMAXPROCS(0), len(live)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for v := range work {
				s.applyTo(v, m, now)
			}
		}()
	}
	for _, v := range live {
		work <- v
	}
	close(work)
	wg.Wait()
	s.enc.views.Set(float64(len(s.views)))
	s.rebindLocked(added)
	s.readyOnce.Do(func() { close(s.ready) })
}

// Subscribe attaches an agent to the view of key, creating it if needed.
// notify (or nil) is called, with the view's lock held, whenever the view
// has a new current version or Rebind turns true: it must not block and
// must not call back into the view; the subscriber then reads Current and
// asks Response for what it lacks. Nothing is queued per subscriber, so a
// slow one costs no memory and gets one response for many versions. It
// returns nil before the first model (wait for Ready).
func (s *Store) Subscribe(key Key, notify func()) *Sub {
	key.ClusterDomain = registry.CanonicalHost(key.ClusterDomain)
	if key.ClusterDomain == "" {
		key.ClusterDomain = s.cfg.ClusterDomain
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.model == nil {
		return nil
	}
	ns := key.Namespace
	key = s.canonicalLocked(key)
	v, ok := s.views[key]
	if !ok {
		v = &View{key: key, enc: s.enc, subs: map[*Sub]struct{}{}}
		s.applyTo(v, s.model, s.cfg.Now())
		s.views[key] = v
		s.enc.views.Set(float64(len(s.views)))
	}
	sub := &Sub{view: v, namespace: ns, notify: notify}
	v.mu.Lock()
	v.subs[sub] = struct{}{}
	v.mu.Unlock()
	return sub
}

// Version returns the registry model version applied last, 0 before the
// first.
func (s *Store) Version() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.model == nil {
		return 0
	}
	return s.model.Version
}

// Lookup returns the view of key, or nil.
func (s *Store) Lookup(key Key) *View {
	key.ClusterDomain = registry.CanonicalHost(key.ClusterDomain)
	if key.ClusterDomain == "" {
		key.ClusterDomain = s.cfg.ClusterDomain
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.views[s.canonicalLocked(key)]
}

// applyTo brings v to model m: incrementally when v reflects the model
// just before m, else by a full build. Called with s.mu held.
func (s *Store) applyTo(v *View, m *registry.Model, now time.Time) {
	cur := v.Current()
	if cur != nil && m.Touched != nil && v.model+1 == m.Version {
		if nv, before := update(cur, m, v.key, s.cfg.ClusterDomain, now); nv != nil {
			v.advance(nv, before, s.cfg.History)
		}
	} else {
		v.advance(build(m, v.key, s.cfg.ClusterDomain, now), nil, s.cfg.History)
	}
	v.model = m.Version
}

// advance makes nv current unless it equals the current version. before
// holds the entries the names nv changed had in the current version; nil
// means unknown (a full build), and the two tables are compared.
func (v *View) advance(nv *Version, before map[string]*registry.Candidate, history int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	nv.enc = v.enc
	st := &step{id: nv.ID, zones: nv.Zones, before: before}
	if cur := v.cur.Load(); cur != nil {
		if cur.ID == nv.ID {
			return
		}
	}
	if cur := v.cur.Load(); cur != nil && before == nil {
		st.before = map[string]*registry.Candidate{}
		nv.names.each(func(k string, c *registry.Candidate) {
			if o := cur.names.get(k); o != c {
				st.before[k] = o // nil when k is new
			}
		})
		cur.names.each(func(k string, o *registry.Candidate) {
			if nv.names.get(k) == nil {
				st.before[k] = o
			}
		})
	}
	v.prev.Store(v.cur.Load())
	v.cur.Store(nv)
	v.steps = append(v.steps, st)
	if len(v.steps) > history {
		v.steps[0] = nil
		v.steps = v.steps[1:]
	}
	for sub := range v.subs {
		sub.wake()
	}
}

// Key returns the view's key.
func (v *View) Key() Key { return v.key }

// Current returns the current version.
func (v *View) Current() *Version { return v.cur.Load() }

// Previous returns the version Current replaced, or nil for the first.
func (v *View) Previous() *Version { return v.prev.Load() }

// Response returns what takes an agent holding version base to target: a
// delta when base is in the history (an empty one when base is target),
// else a full table.
func (v *View) Response(base string, target *Version) *Prepared {
	if base == "" {
		return target.Full()
	}
	if base == target.ID {
		return target.DeltaFrom(base, nil, target.Zones)
	}
	if p := target.cachedDelta(base); p != nil {
		return p
	}
	v.mu.Lock()
	from, to := -1, -1
	for i, st := range v.steps {
		switch st.id {
		case base:
			from = i
		case target.ID:
			to = i
		}
	}
	if from < 0 || to <= from {
		v.mu.Unlock()
		return target.Full()
	}
	// The entry a name had at base is its "before" in the first step
	// after base that changed it; names no step changed are the same in
	// base and target.
	baseOf := map[string]*registry.Candidate{}
	for _, st := range v.steps[from+1 : to+1] {
		for k, c := range st.before {
			if _, seen := baseOf[k]; !seen {
				baseOf[k] = c
			}
		}
	}
	baseZones := v.steps[from].zones
	v.mu.Unlock()
	return target.DeltaFrom(base, baseOf, baseZones)
}

// View returns the subscribed view.
func (s *Sub) View() *View { return s.view }

// wake tells the subscriber to look at the view. Called with the view
// lock held.
func (s *Sub) wake() {
	if s.notify != nil {
		s.notify()
	}
}

// Close detaches the subscription; idempotent.
func (s *Sub) Close() {
	if s.closed.Swap(true) {
		return
	}
	v := s.view
	v.mu.Lock()
	delete(v.subs, s)
	if len(v.subs) == 0 {
		v.idleSince = time.Now()
	}
	v.mu.Unlock()
}
