package agent

import (
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshdns/meshdns/agent/discovery"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// served is one table version as the agent serves it. It is immutable once
// stored.
type served struct {
	Version string
	Source  string
	Applied time.Time
	// Proto returns the NameTable for /debug/nametable. From the control
	// plane it is the message the discovery client holds anyway for its
	// deltas; a file table is read again on demand instead of being kept
	// (a decoded 10,000-name table is ~5 MB the hot path never uses). The
	// converted entries are dropped once built for the same reason.
	Proto func() (*namewire.NameTable, error)
	Names int
	Table *nametable.Table
	// Partial: Table is partly another version's (a staged replacement
	// that could not be undone, stage.go); the next table is built whole.
	Partial bool
}

// tables holds the table being served. Builds happen on the caller's
// goroutine (the file watcher or the discovery stream), never on the query
// path; the finished table is published with one atomic store.
type tables struct {
	pod    nametable.Context
	limits Limits
	m      *metrics
	now    func() time.Time
	// publish hands a new table to the DNS server.
	publish func(*nametable.Table)
	// built, or nil, runs after each table swap (memory release).
	built func()
	// log, or nil, receives what is not the caller's to report.
	log *slog.Logger

	mu  sync.Mutex // serialises apply, so versions are published in order
	cur atomic.Pointer[served]
}

// current returns the table being served, or nil before the first.
func (ts *tables) current() *served { return ts.cur.Load() }

// apply validates and builds nt, then swaps it in. On error the table being
// served stays and the error says why; the caller logs it.
func (ts *tables) apply(source, version string, nt *namewire.NameTable) error {
	if nt == nil {
		nt = &namewire.NameTable{}
	}
	return ts.applyWith(source, version, nt, func() (*namewire.NameTable, error) { return nt, nil })
}

// applyWith is apply with the function that gives the table back for
// debugging; nt itself is not kept.
func (ts *tables) applyWith(source, version string, nt *namewire.NameTable, dump func() (*namewire.NameTable, error)) error {
	_, err := ts.build(source, version, ts.fromEntries(func() ([]nametable.Entry, []string, error) { return Convert(nt, ts.limits) }), dump)
	return err
}

// applyWire builds a table in its wire form (from the discovery client),
// name by name into the table's builder.
func (ts *tables) applyWire(source, version string, wire discovery.WireTable, dump func() (*namewire.NameTable, error)) error {
	_, err := ts.build(source, version, func() (*nametable.Table, int, error) { return buildWire(wire, ts.limits, ts.pod) }, dump)
	return err
}

// maxGarbage is the share of a patched table's storage that removed names
// may leave behind before a delta is built whole again (nametable
// Table.Garbage).
const maxGarbage = 0.25

// applyWireDelta applies a delta: it patches the table being served with
// what the delta changes (nametable Table.Patch: the new table shares the
// old one's storage, so a delta costs a small part of a table, not a whole
// second one beside the first), and builds next whole when there is no
// table to patch, the zones change, the table carries too much garbage,
// or the patch fails (then the full build says whether next is valid).
func (ts *tables) applyWireDelta(source, version string, next discovery.WireTable, change func() (discovery.Change, bool, error), dump func() (*namewire.NameTable, error)) error {
	_, err := ts.buildFrom(source, version, func(prev *served) (*nametable.Table, int, error) {
		if prev != nil && prev.Table != nil && !prev.Partial && prev.Table.Garbage() <= maxGarbage {
			// Inside the build: after its collection, under its limit.
			restore := changeLimit()
			c, ok, err := change()
			if err != nil {
				restore()
				return nil, 0, err
			}
			if ok && !c.ZonesChanged {
				var t *nametable.Table
				var n int
				if c.Next != nil {
					t, n, err = ts.applyStaged(prev, wireStaged(c, ts.limits))
				} else {
					t, n, err = patchTable(prev, c, ts.limits)
				}
				if err == nil {
					return t, n, nil
				}
				if ts.log != nil {
					ts.log.Warn("name table patch failed; building the table whole", "version", version, "err", err)
				}
			}
			c = discovery.Change{}
			restore()
			runtime.GC() // the comparison's hashes, before the whole build
		}
		return buildWire(next, ts.limits, ts.pod)
	}, dump)
	return err
}

// patchTable converts what c changes and patches prev's table with it.
func patchTable(prev *served, c discovery.Change, lim Limits) (*nametable.Table, int, error) {
	lim = lim.withDefaults()
	var remove, add []nametable.Entry
	info := new(namewire.NameInfo)
	err := c.Old(func(host string, raw []byte) error {
		if err := info.Unmarshal(raw); err != nil {
			return err
		}
		e, err := convertInfo(strings.Clone(host), info, lim) // host is the walk's
		if err != nil {
			return err
		}
		remove = append(remove, e)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	for _, n := range c.New {
		if err := info.Unmarshal(n.Info); err != nil {
			return nil, 0, fmt.Errorf("%w: name %q: %v", ErrInvalidTable, n.Host, err)
		}
		e, err := convertInfo(n.Host, info, lim)
		if err != nil {
			return nil, 0, fmt.Errorf("%w: name %q: %v", ErrInvalidTable, n.Host, err)
		}
		add = append(add, e)
	}
	return patchEntries(prev, remove, add, c.Names, lim)
}

// patchEntries patches prev's table with remove and add; want is the number
// of names the result must have, or -1.
func patchEntries(prev *served, remove, add []nametable.Entry, want int, lim Limits) (*nametable.Table, int, error) {
	lim = lim.withDefaults()
	names := prev.Names - len(remove) + len(add)
	if want >= 0 && names != want {
		return nil, 0, fmt.Errorf("a patch to %d names, but the table has %d", names, want)
	}
	if names > lim.MaxNames {
		return nil, 0, fmt.Errorf("%w: %d names, more than the limit of %d", ErrInvalidTable, names, lim.MaxNames)
	}
	t, err := prev.Table.Patch(remove, add)
	if err != nil {
		return nil, 0, err
	}
	return t, names, nil
}

// applyFile builds the table of a --nametable-file with produce (which
// reads the file name by name into the builder) and returns how many names
// it holds.
//
// With patch (the table served came from the previous content of the
// file), what the new content changes patches the table being served, as
// a stream delta does, unless patch says it is better built whole.
func (ts *tables) applyFile(version string, produce func(Limits, nametable.Context) (*nametable.Table, int, error), patch filePatch, dump func() (*namewire.NameTable, error)) (int, error) {
	return ts.buildFrom(sourceFile, version, func(prev *served) (*nametable.Table, int, error) {
		if patch != nil && prev != nil && prev.Source == sourceFile && prev.Table != nil && !prev.Partial && prev.Table.Garbage() <= maxGarbage {
			restore := changeLimit()
			d, ok, err := patch(ts.limits, prev.Names)
			if err != nil {
				restore()
				return nil, 0, err
			}
			if ok {
				var t *nametable.Table
				var n int
				if d.staged != nil {
					t, n, err = ts.applyStaged(prev, d.staged)
				} else {
					t, n, err = patchEntries(prev, d.remove, d.add, d.names, ts.limits)
				}
				if err == nil {
					return t, n, nil
				}
				if ts.log != nil {
					ts.log.Warn("name table patch failed; building the table whole", "version", version, "err", err)
				}
			}
			d = fileDiff{}
			restore()
			runtime.GC() // the comparison's hashes, before the whole build
		}
		return produce(ts.limits, ts.pod)
	}, dump)
}

// fromEntries builds the table of the entries convert returns.
func (ts *tables) fromEntries(convert func() ([]nametable.Entry, []string, error)) func() (*nametable.Table, int, error) {
	return func() (*nametable.Table, int, error) {
		entries, zones, err := convert()
		if err != nil {
			return nil, 0, err
		}
		t, err := nametable.New(entries, zones, ts.pod)
		return t, len(entries), err
	}
}

// build builds a table with produce and swaps it in.
func (ts *tables) build(source, version string, produce func() (*nametable.Table, int, error), dump func() (*namewire.NameTable, error)) (int, error) {
	return ts.buildFrom(source, version, func(*served) (*nametable.Table, int, error) { return produce() }, dump)
}

// buildFrom is build with produce given the table being served (or nil).
func (ts *tables) buildFrom(source, version string, produce func(prev *served) (*nametable.Table, int, error), dump func() (*namewire.NameTable, error)) (int, error) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	prev := ts.cur.Load()
	var prevInfo []string // version and source
	if prev != nil {
		// The same table again, with an empty answer cache: the old
		// cache (up to a fifth of the table) is garbage before the
		// build, not beside it at the peak. The few questions asked
		// during the build fill the new one.
		ts.publish(prev.Table)
		prevInfo = []string{prev.Version, prev.Source}
	}
	defer buildMemory(prev != nil)()
	start := ts.now()
	// prev is not used after produce: a staged replacement (stage.go)
	// lets the old table go stage by stage.
	t, names, err := produce(prev)
	if err != nil {
		ts.m.rejections.WithLabelValues(source).Inc()
		return 0, fmt.Errorf("table %s from %s: %w", version, source, err)
	}
	now := ts.now()
	ts.m.build.Observe(now.Sub(start).Seconds())
	s := &served{Version: version, Source: source, Applied: now, Proto: dump, Names: names, Table: t}
	ts.cur.Store(s)
	ts.publish(t)
	if prevInfo != nil {
		ts.m.info.DeleteLabelValues(prevInfo...)
	}
	ts.m.info.WithLabelValues(version, source).Set(1)
	ts.m.entries.Set(float64(names))
	ts.m.updates.WithLabelValues(source).Inc()
	ts.m.lastUpdate.Set(float64(now.UnixNano()) / 1e9)
	if ts.built != nil {
		ts.built()
	}
	return names, nil
}
