// Package ingest turns versions of the name table, from whichever source
// (the table file, the control plane stream, the state directory), into
// the value the DNS server answers from: the nametable.Table and the
// version's settings converted (Served).
//
// A source hands over a Version: its identity and a walk of its names in
// the stream's wire form. Ingest converts its settings (Config.Settings),
// compares it with the version it serves (internal/hashdiff), and one
// planner (plan.go) decides how the new table is made: patched into the
// table serving, replaced in staged patches of it (stages.go), or built
// whole. The finished version is committed at one point (commit): stored
// with one atomic store and published whole, once; builds happen on the
// source's goroutine, never on the query path.
package ingest

import (
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// Version is one version of the name table as a source yields it.
type Version interface {
	// ID names the version: the control plane's version_info, or a hash
	// of a file's content.
	ID() string
	// Walk calls name for every name of the table with its NameInfo
	// marshalled (meshdns.v1 wire form), and zone for every authoritative
	// zone, in the order the source holds them; a nil name or zone skips
	// those. host and info are valid during the call only. A version may
	// be walked many times for as long as it is served (comparisons,
	// /debug/nametable); a walk of content that is no longer the
	// version's fails.
	Walk(name func(host, info []byte) error, zone func(zone string) error) error
}

// Sources of a table, the bounded values of the source label.
const (
	SourceFile         = "file"
	SourceControlPlane = "controlplane"
	SourceState        = "state"
	SourceNone         = "none" // no table source: forward everything
)

var sources = []string{SourceFile, SourceControlPlane, SourceState, SourceNone}

// Config configures an Ingest serving versions whose settings convert to
// S (what the consumer needs of them, built once per version). Zero fields
// take the default named beside them.
type Config[S any] struct {
	// Pod is the pod the tables answer for (its namespace, for search
	// expansions).
	Pod nametable.Context
	// IgnorePodZone builds every table without the pod zone of the
	// version's settings: headless answers in the table's order, as
	// without a zone.
	IgnorePodZone bool
	// Limits bound every table.
	Limits Limits
	// Settings converts a version's settings (nil for none) before its
	// table is made; an error rejects the version. It must be a pure
	// function of its argument: a version carrying the settings pointer of
	// the one served takes that one's conversion. Nil: every version's S
	// is the zero S.
	Settings func(*namewire.AgentSettings) (S, error)
	// Publish receives each version that becomes served, once, with its
	// table and converted settings (commit). Required.
	Publish func(*Served[S])
	// Swap receives the tables that serve between two versions, for the
	// version already published: the served table again before a build
	// (to drop its answer cache), each stage of a staged change, and the
	// last good table rebuilt after stages of a bad version. The settings
	// in force stay. Required.
	Swap func(*nametable.Table)
	// Built, or nil, runs after each table swap.
	Built func()
	// Logger receives the planner's decisions and what is not the
	// caller's to report; slog.Default() when nil.
	Logger *slog.Logger
	// Registry receives the table metrics (metrics.go). Required.
	Registry *meshmetrics.Registry
	// Now is the clock; time.Now.
	Now func() time.Time
}

// Served is one version as the agent serves it: its table and its
// settings as Config.Settings converted them. It is immutable once
// stored.
type Served[S any] struct {
	Version string
	Source  string
	Applied time.Time
	Names   int
	Table   *nametable.Table
	// Settings are the version's settings, converted; the zero S for a
	// version without settings (a table file, the empty table of no
	// source) or without Config.Settings.
	Settings S
	// v is the version's content, walked again by the next comparison
	// and by Dump; nil for the empty table of no source.
	v Version
}

// AgentSettings returns the settings of the version served as it carries
// them, or nil when it has none.
func (s *Served[S]) AgentSettings() *namewire.AgentSettings {
	if s.v == nil {
		return nil
	}
	return settingsOf(s.v)
}

// Dump decodes the version served whole, for /debug/nametable.
func (s *Served[S]) Dump() (*namewire.NameTable, error) {
	if s.v == nil {
		return &namewire.NameTable{Table: map[string]*namewire.NameInfo{}, Settings: s.AgentSettings()}, nil
	}
	nt, err := namewire.Collect(s.v.Walk)
	if err != nil {
		return nil, err
	}
	nt.Settings = s.AgentSettings()
	return nt, nil
}

// Ingest holds the version being served and applies new versions to it.
type Ingest[S any] struct {
	cfg Config[S]
	lim Limits
	m   *metrics
	log *slog.Logger

	mu  sync.Mutex // serialises Apply, so versions are published in order
	cur atomic.Pointer[Served[S]]
}

// New checks cfg and returns an Ingest serving no table yet.
func New[S any](cfg Config[S]) (*Ingest[S], error) {
	if cfg.Publish == nil || cfg.Swap == nil || cfg.Registry == nil {
		return nil, errors.New("ingest: Publish, Swap and Registry are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	m, err := newMetrics(cfg.Registry)
	if err != nil {
		return nil, err
	}
	return &Ingest[S]{cfg: cfg, lim: cfg.Limits.withDefaults(), m: m, log: cfg.Logger}, nil
}

// Current returns the version being served, or nil before the first.
func (in *Ingest[S]) Current() *Served[S] { return in.cur.Load() }

// Apply makes v, from source, the version served: its settings are
// converted, its table made (the planner, plan.go), and the two committed
// together as one Served. On error the version being served stays and
// the error says why (wrapping ErrInvalidTable for a table that is not
// valid); the caller reports it. A nil v is the empty table (no source).
func (in *Ingest[S]) Apply(source string, v Version) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	prev := in.cur.Load()
	id := "none"
	if v != nil {
		id = v.ID()
	}
	st, err := in.settings(prev, v)
	if err != nil {
		// Settings the agent cannot convert never reach the table: no
		// cache is dropped and no table rejection counted.
		return fmt.Errorf("table %s from %s: %w", id, source, err)
	}
	var prevInfo []string // version and source: nothing may hold prev past plan
	if prev != nil {
		// The same table again, with an empty answer cache: the old
		// cache (up to a fifth of the table) is garbage before the
		// build, not beside it at the peak. The few questions asked
		// during the build fill the new one.
		in.cfg.Swap(prev.Table)
		prevInfo = []string{prev.Version, prev.Source}
	}
	if v != nil {
		if err := supported(settingsOf(v)); err != nil {
			in.m.rejections.WithLabelValues(source).Inc()
			return fmt.Errorf("table %s from %s: %w", id, source, err)
		}
	}
	restore, lowered := buildMemory(prev != nil)
	defer restore()
	start := in.cfg.Now()
	t, names, err := in.plan(prev, id, v, lowered && prev == nil)
	if err != nil {
		in.m.rejections.WithLabelValues(source).Inc()
		return fmt.Errorf("table %s from %s: %w", id, source, err)
	}
	in.commit(prevInfo, &Served[S]{Version: id, Source: source, Applied: in.cfg.Now(), Names: names, Table: t, Settings: st, v: v}, start)
	return nil
}

// settings converts v's settings, or takes the conversion of prev's when
// v carries the same ones (a delta that did not change them).
func (in *Ingest[S]) settings(prev *Served[S], v Version) (S, error) {
	var zero S
	raw := settingsOf(v)
	if in.cfg.Settings == nil {
		return zero, nil
	}
	if prev != nil && raw != nil && prev.AgentSettings() == raw {
		return prev.Settings, nil
	}
	return in.cfg.Settings(raw)
}

// commit makes s the version served: the one place where a version
// becomes served. It is stored (Current), published whole to the
// consumer, and reported; prevInfo is the version and source it
// replaces, or nil, and start when making its table began.
func (in *Ingest[S]) commit(prevInfo []string, s *Served[S], start time.Time) {
	in.m.build.Observe(s.Applied.Sub(start).Seconds())
	in.cur.Store(s)
	in.cfg.Publish(s)
	if prevInfo != nil {
		in.m.info.DeleteLabelValues(prevInfo...)
	}
	in.m.info.WithLabelValues(s.Version, s.Source).Set(1)
	in.m.entries.Set(float64(s.Names))
	in.m.updates.WithLabelValues(s.Source).Inc()
	in.m.lastUpdate.Set(float64(s.Applied.UnixNano()) / 1e9)
	if in.cfg.Built != nil {
		in.cfg.Built()
	}
}

// swap serves t as the table of keep's version, already published: a
// stage of a change, or its last good table rebuilt.
func (in *Ingest[S]) swap(keep Served[S], t *nametable.Table) {
	keep.Table = t
	in.cur.Store(&keep)
	in.cfg.Swap(t)
}
