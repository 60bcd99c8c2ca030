package registry

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshdns/meshdns/controlplane/internal/deps"
)

// Config configures a Registry. The zero value is usable.
type Config struct {
	// Debounce is how long the registry waits for further updates after
	// one arrives before it builds a version; zero means 100ms.
	Debounce time.Duration
	// MaxDelay bounds the wait of a burst that never goes quiet; zero
	// means 10 * Debounce.
	MaxDelay time.Duration
	// Expect names sources that must report once before the first version
	// is published, so agents never get a table missing a whole source.
	// Empty: the first update publishes.
	Expect []string
	// Logger; nil discards.
	Logger *slog.Logger
	// Registerer for the metrics; nil registers nowhere.
	Registerer prometheus.Registerer
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Registry merges the snapshots of all sources into one Model and publishes
// a new version per debounced burst of updates. It implements Sink.
type Registry struct {
	cfg Config
	log *slog.Logger
	m   *metrics

	mu      sync.Mutex           // guards following
	pending map[string]*Snapshot // latest snapshot per source not yet built
	changed time.Time            // earliest Snapshot.Changed among pending

	kick chan struct{}

	// sources is owned by the Run goroutine.
	sources map[string]*sourceState

	latest atomic.Pointer[Model]

	subMu sync.Mutex // guards subs
	subs  []chan struct{}
}

type sourceState struct {
	zones []string
	names map[string][]*Candidate
	order []string // hostnames in first-seen order, for a stable merge
}

var _ Sink = (*Registry)(nil)

// New returns a registry; Run builds and publishes versions.
func New(cfg Config) (*Registry, error) {
	if cfg.Debounce <= 0 {
		cfg.Debounce = 100 * time.Millisecond
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = 10 * cfg.Debounce
	}
	cfg.Now = deps.Now(cfg.Now)
	log := deps.Logger(cfg.Logger)
	reg := deps.Registerer(cfg.Registerer)
	m, err := newMetrics(reg)
	if err != nil {
		return nil, fmt.Errorf("registry metrics: %w", err)
	}
	return &Registry{
		cfg:     cfg,
		log:     log,
		m:       m,
		pending: map[string]*Snapshot{},
		kick:    make(chan struct{}, 1),
		sources: map[string]*sourceState{},
	}, nil
}

// Update stores the complete state of source; it never blocks on the build.
func (r *Registry) Update(source string, s Snapshot) {
	r.m.sourceUpdates.WithLabelValues(source).Inc()
	r.mu.Lock()
	r.pending[source] = &s
	if !s.Changed.IsZero() && (r.changed.IsZero() || s.Changed.Before(r.changed)) {
		r.changed = s.Changed
	}
	r.mu.Unlock()
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// Latest returns the current model, or nil before the first one.
func (r *Registry) Latest() *Model { return r.latest.Load() }

// Subscribe returns a channel that receives a value whenever a new model is
// published (several publications may fold into one value; read Latest).
// Subscriptions live as long as the registry.
func (r *Registry) Subscribe() <-chan struct{} {
	ch := make(chan struct{}, 1)
	r.subMu.Lock()
	r.subs = append(r.subs, ch)
	r.subMu.Unlock()
	if r.latest.Load() != nil {
		ch <- struct{}{}
	}
	return ch
}

// Run debounces updates into versions until ctx ends.
func (r *Registry) Run(ctx context.Context) error {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var burst time.Time // start of the current burst; zero when idle
	for {
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil
		case <-r.kick:
			now := r.cfg.Now()
			if burst.IsZero() {
				burst = now
			}
			// Wait for quiet, but never longer than MaxDelay from the
			// burst's start: a source updating every 50ms must not
			// starve the agents.
			wait := min(r.cfg.Debounce, burst.Add(r.cfg.MaxDelay).Sub(now))
			timer.Reset(max(wait, 0))
		case <-timer.C:
			burst = time.Time{}
			r.build()
		}
	}
}

// build folds the pending snapshots into a new model and publishes it.
func (r *Registry) build() {
	r.mu.Lock()
	pending, changed := r.pending, r.changed
	r.pending, r.changed = map[string]*Snapshot{}, time.Time{}
	r.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	names := make([]string, 0, len(pending))
	for n := range pending {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		r.sources[name] = r.convert(name, pending[name], r.sources[name])
	}
	for _, e := range r.cfg.Expect {
		if _, ok := r.sources[e]; !ok {
			r.log.Info("waiting for source before the first version", "source", e)
			r.keepChanged(changed)
			return
		}
	}
	prev := r.latest.Load()
	m := r.merge()
	m.Changed = changed
	m.Built = r.cfg.Now()
	if prev != nil {
		m.Touched = touched(prev, m)
		m.Version = prev.Version + 1
	} else {
		m.Version = 1
	}
	r.latest.Store(m)
	r.m.versions.Inc()
	r.m.version.Set(float64(m.Version))
	r.m.names.Set(float64(len(m.Names)))
	r.log.Debug("published version", "version", m.Version, "names", len(m.Names), "zones", m.Zones)
	r.subMu.Lock()
	for _, ch := range r.subs {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	r.subMu.Unlock()
}

// keepChanged puts a change time back when a build is deferred, so the
// programming latency still counts from the first change.
func (r *Registry) keepChanged(t time.Time) {
	if t.IsZero() {
		return
	}
	r.mu.Lock()
	if r.changed.IsZero() || t.Before(r.changed) {
		r.changed = t
	}
	r.mu.Unlock()
}

// convert turns a snapshot into candidates, reusing the previous state's
// Candidate pointers for entries that did not change. Comparing an entry
// with the one it came from is ~50x cheaper than converting and encoding
// it, and a source resends all its entries for every change.
func (r *Registry) convert(source string, s *Snapshot, old *sourceState) *sourceState {
	st := &sourceState{zones: normalizeZones(s.Zones), names: make(map[string][]*Candidate, len(s.Entries))}
	for _, e := range s.Entries {
		host := CanonicalHost(e.Hostname)
		// The hostname is a proto3 string map key in every table, and
		// the agent rejects a whole table with invalid UTF-8 in one (check
		// before lowering: ToLower turns bad bytes into U+FFFD).
		if host == "" || !utf8.ValidString(e.Hostname) {
			r.m.invalid.Inc()
			r.log.Warn("dropping entry without a valid hostname", "source", source, "hostname", host)
			continue
		}
		c := reuse(old, host, e)
		if c == nil {
			var err error
			if c, err = newCandidate(source, e); err != nil {
				r.m.invalid.Inc()
				r.log.Warn("dropping entry", "source", source, "hostname", host, "err", err)
				continue
			}
			if old != nil {
				// Same answer from a differently spelt entry (say, IPs
				// in another order is a change, but a new slice with the
				// same values is not): keep the old pointer too.
				for _, oc := range old.names[host] {
					if oc.sameAs(c) {
						c = oc
						break
					}
				}
			}
		}
		if _, seen := st.names[host]; !seen {
			st.order = append(st.order, host)
		}
		st.names[host] = append(st.names[host], c)
	}
	return st
}

func (r *Registry) merge() *Model {
	srcs := make([]string, 0, len(r.sources))
	total := 0
	for n, st := range r.sources {
		srcs = append(srcs, n)
		total += len(st.names)
	}
	sort.Strings(srcs)
	m := &Model{Names: make(map[string][]*Candidate, total)}
	for _, n := range srcs {
		st := r.sources[n]
		for _, host := range st.order {
			cs := st.names[host]
			if have, ok := m.Names[host]; ok {
				// Copy before appending: the slice may be a source's own.
				m.Names[host] = append(slices.Clip(have), cs...)
			} else {
				m.Names[host] = cs
			}
		}
		m.Zones = append(m.Zones, st.zones...)
	}
	m.Zones = normalizeZones(m.Zones)
	return m
}

func normalizeZones(zs []string) []string {
	out := make([]string, 0, len(zs))
	for _, z := range zs {
		if z = CanonicalHost(z); z != "" {
			out = append(out, z)
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// reuse returns the old candidate made from an entry equal to e, or nil.
func reuse(old *sourceState, host string, e Entry) *Candidate {
	if old == nil {
		return nil
	}
	for _, oc := range old.names[host] {
		if entryEqual(oc.entry, e) {
			return oc
		}
	}
	return nil
}

// touched returns the hostnames whose candidate lists differ between the
// models. Unchanged entries keep their Candidate pointers (see convert), so
// comparing pointers finds the change among 10,000 names in one pass.
func touched(prev, m *Model) map[string]struct{} {
	t := map[string]struct{}{}
	for h, cs := range m.Names {
		if !slices.Equal(prev.Names[h], cs) {
			t[h] = struct{}{}
		}
	}
	for h := range prev.Names {
		if _, ok := m.Names[h]; !ok {
			t[h] = struct{}{}
		}
	}
	return t
}
