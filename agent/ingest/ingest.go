// Package ingest turns versions of the name table, from whichever source
// (the table file, the control plane stream, the state directory), into
// the nametable.Table the DNS server answers from.
//
// A source hands over a Version: its identity and a walk of its names in
// the stream's wire form. Ingest compares it with the version it serves
// (internal/hashdiff), and one planner (plan.go) decides how the new table
// is made: patched into the table serving, replaced in staged patches of it
// (stages.go), or built whole. The finished table is published with one
// atomic store; builds happen on the source's goroutine, never on the
// query path.
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

// Config configures an Ingest. Zero fields take the default named beside
// them.
type Config struct {
	// Pod is the pod the tables answer for (its namespace, for search
	// expansions).
	Pod nametable.Context
	// IgnorePodZone builds every table without the pod zone of the
	// version's settings: headless answers in the table's order, as
	// without a zone.
	IgnorePodZone bool
	// Limits bound every table.
	Limits Limits
	// Publish hands a new table to the DNS server. Required.
	Publish func(*nametable.Table)
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

// Served is one table version as the agent serves it. It is immutable once
// stored.
type Served struct {
	Version string
	Source  string
	Applied time.Time
	Names   int
	Table   *nametable.Table
	// v is the version's content, walked again by the next comparison
	// and by Dump; nil for the empty table of no source.
	v Version
}

// Settings returns the agent settings of the version served, or nil when
// it has none (features that consume them read them here).
func (s *Served) Settings() *namewire.AgentSettings {
	if s.v == nil {
		return nil
	}
	return settingsOf(s.v)
}

// Dump decodes the version served whole, for /debug/nametable.
func (s *Served) Dump() (*namewire.NameTable, error) {
	nt := &namewire.NameTable{Table: map[string]*namewire.NameInfo{}, Settings: s.Settings()}
	if s.v == nil {
		return nt, nil
	}
	err := s.v.Walk(func(host, raw []byte) error {
		info := new(namewire.NameInfo)
		if err := info.Unmarshal(raw); err != nil {
			return fmt.Errorf("name %q: %w", host, err)
		}
		nt.Table[string(host)] = info
		return nil
	}, func(z string) error {
		nt.AuthoritativeZones = append(nt.AuthoritativeZones, z)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return nt, nil
}

// Ingest holds the table being served and applies new versions to it.
type Ingest struct {
	cfg Config
	lim Limits
	m   *metrics
	log *slog.Logger

	mu  sync.Mutex // serialises Apply, so versions are published in order
	cur atomic.Pointer[Served]
}

// New checks cfg and returns an Ingest serving no table yet.
func New(cfg Config) (*Ingest, error) {
	if cfg.Publish == nil || cfg.Registry == nil {
		return nil, errors.New("ingest: Publish and Registry are required")
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
	return &Ingest{cfg: cfg, lim: cfg.Limits.withDefaults(), m: m, log: cfg.Logger}, nil
}

// Current returns the table being served, or nil before the first.
func (in *Ingest) Current() *Served { return in.cur.Load() }

// Apply makes v, from source, the table served. On error the table being
// served stays and the error says why (wrapping ErrInvalidTable for a
// table that is not valid); the caller reports it. A nil v is the empty
// table (no source).
func (in *Ingest) Apply(source string, v Version) error {
	in.mu.Lock()
	defer in.mu.Unlock()
	prev := in.cur.Load()
	var prevInfo []string // version and source
	if prev != nil {
		// The same table again, with an empty answer cache: the old
		// cache (up to a fifth of the table) is garbage before the
		// build, not beside it at the peak. The few questions asked
		// during the build fill the new one.
		in.cfg.Publish(prev.Table)
		prevInfo = []string{prev.Version, prev.Source}
	}
	id := "none"
	if v != nil {
		id = v.ID()
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
	now := in.cfg.Now()
	in.m.build.Observe(now.Sub(start).Seconds())
	s := &Served{Version: id, Source: source, Applied: now, Names: names, Table: t, v: v}
	in.cur.Store(s)
	in.cfg.Publish(t)
	if prevInfo != nil {
		in.m.info.DeleteLabelValues(prevInfo...)
	}
	in.m.info.WithLabelValues(id, source).Set(1)
	in.m.entries.Set(float64(names))
	in.m.updates.WithLabelValues(source).Inc()
	in.m.lastUpdate.Set(float64(now.UnixNano()) / 1e9)
	if in.cfg.Built != nil {
		in.cfg.Built()
	}
	return nil
}
