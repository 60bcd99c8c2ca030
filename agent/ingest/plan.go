package ingest

import (
	"fmt"
	"slices"

	"github.com/meshdns/meshdns/internal/hashdiff"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// Strategies of the planner, the bounded values of the strategy label.
const (
	strategyBuild  = "build"  // built whole, beside the table serving
	strategyPatch  = "patch"  // the names that differ patched in (nametable Table.Patch)
	strategyStaged = "staged" // every name replaced in stageCount patches (stages.go)
)

var strategies = []string{strategyBuild, strategyPatch, strategyStaged}

// maxGarbage is the share of a patched table's storage that removed names
// may leave behind before a change is built whole again (nametable
// Table.Garbage).
const maxGarbage = 0.25

// plan makes the table of v, given the table served (or nil), in the way
// the comparison of the two says costs least memory:
//   - at most hashdiff.MaxPatchShare of the names changed: a patch of the
//     table serving with the names that differ (it shares the old table's
//     storage, so it costs a small part of a table, not a second one);
//   - a larger change: staged, stageCount patches of the table serving
//     that replace every name, each served before the next (stages.go),
//     so the old table's memory is freed as the new one's is taken;
//   - anything else is built whole beside the table serving: no table to
//     compare with, one that carries too much garbage, other zones, or a
//     comparison that fails (the old content is gone). The whole build is
//     also what checks a table strictly, so a patch or a stage that fails
//     is built whole, which says whether v is valid; when it is not after
//     stages were served, the old version is built whole again.
//
// The decision and its reason are logged, and counted by strategy.
//
// paced: a start, whose build paces GOGC (startPace).
func (in *Ingest[S]) plan(prev *Served[S], id string, v Version, paced bool) (*nametable.Table, int, error) {
	if v == nil {
		t, err := nametable.New(nil, nil, in.cfg.Pod)
		in.m.applies.WithLabelValues(strategyBuild).Inc()
		return t, 0, err
	}
	var reason string
	switch {
	case prev == nil || prev.v == nil:
		reason = "no table to compare with"
	case prev.Table.Garbage() > maxGarbage:
		reason = "the table serving carries too much garbage"
	case prev.Table.LocalZone() != in.pod(v).Zone:
		// The zone orders every headless answer (nametable
		// Context.Zone): the version that carries a new one serves a
		// table built with it.
		reason = "the pod's zone changed"
	default:
		restore := changeLimit()
		c, err := compare(prev.v, v, prev.Names)
		switch {
		case err != nil:
			reason = "comparison failed: " + err.Error()
		case c.zonesChanged:
			reason = "the zones changed"
		case c.base.Small(c.changed):
			t, n, err := in.patch(prev, v, c)
			if err == nil {
				in.decided(strategyPatch, id, fmt.Sprintf("%d of %d names changed", c.changed, c.names))
				restore()
				return t, n, nil
			}
			reason = "patch failed: " + err.Error()
		default:
			names := c.names
			in.decided(strategyStaged, id, fmt.Sprintf("%d of %d names changed: more than a patch", c.changed, c.names))
			c = nil
			restore()
			// prev's table is dropped stage by stage: nothing here
			// may hold it.
			keep := *prev
			keep.Table = nil
			base := prev.Table
			prev = nil
			t, n, err := in.applyStaged(keep, base, v, names)
			if err == nil {
				return t, n, nil
			}
			return in.afterStages(keep, id, v, err)
		}
		c = nil
		restore()
		collect() // the comparison's hashes, before the whole build
	}
	in.decided(strategyBuild, id, reason)
	return build(v, in.lim, in.pod(v), paced)
}

// pod is the context v's table is built for: Config.Pod in the zone
// v's settings name (none with Config.IgnorePodZone).
func (in *Ingest[S]) pod(v Version) nametable.Context {
	pod := in.cfg.Pod
	if s := settingsOf(v); s != nil && !in.cfg.IgnorePodZone {
		pod.Zone = s.PodZone
	}
	return pod
}

// afterStages builds v whole after its stages failed with err; when v is
// not valid, the version of keep is built whole again and served, as the
// stages may have left part of v serving.
func (in *Ingest[S]) afterStages(keep Served[S], id string, v Version, err error) (*nametable.Table, int, error) {
	collect()
	in.decided(strategyBuild, id, "staged patches failed: "+err.Error())
	t, n, err := build(v, in.lim, in.pod(v), false)
	if err == nil {
		return t, n, nil
	}
	collect()
	in.decided(strategyBuild, keep.Version, "the last good version again: "+id+" is not valid")
	old, _, oerr := build(keep.v, in.lim, in.pod(keep.v), false)
	if oerr != nil {
		in.log.Error("the table of the last version could not be built again; a mix of it and the rejected one serves",
			"version", keep.Version, "err", oerr)
		return nil, 0, err
	}
	in.swap(keep, old)
	return nil, 0, err
}

// decided logs and counts the planner's choice.
func (in *Ingest[S]) decided(strategy, id, reason string) {
	in.m.applies.WithLabelValues(strategy).Inc()
	in.log.Info("applying name table", "version", id, "strategy", strategy, "reason", reason)
}

// change is what a version changes in the one served, as the comparison
// found it.
type change struct {
	base         *hashdiff.Base // the old version's names, matched
	names        int            // of the new version
	changed      int            // names of the new version not matched unchanged
	zonesChanged bool
}

// compare walks old (about names names) into hashes, then matches next's
// names against them. It holds two 64-bit hashes per old name, not the
// tables; a collision makes a patch come to another number of names than
// next has, and the table is then built whole.
func compare(old, next Version, names int) (*change, error) {
	// Sized once: grown by appends, the hashes would take up to twice
	// their size while they grow, at the start of a replacement.
	c := &change{base: hashdiff.New(names)}
	oldZones, err := walkZones(old, func(host, info []byte) error {
		c.base.Add(host, info)
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.base.Seal()
	newZones, err := walkZones(next, func(host, info []byte) error {
		c.names++
		if !c.base.Match(host, info) {
			c.changed++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.zonesChanged = !slices.Equal(oldZones, newZones)
	return c, nil
}

// patch patches prev's table with what c found: the entries of next's
// names that differ are added, the old entries of names removed or
// replaced removed.
func (in *Ingest[S]) patch(prev *Served[S], next Version, c *change) (*nametable.Table, int, error) {
	names := prev.Names - c.base.Left() + c.changed
	if names != c.names {
		return nil, 0, fmt.Errorf("a patch to %d names, but the table has %d", names, c.names)
	}
	if names > in.lim.MaxNames {
		return nil, 0, fmt.Errorf("%w: %d names, more than the limit of %d", ErrInvalidTable, names, in.lim.MaxNames)
	}
	conv := converter(in.lim)
	add, err := convertWhere(next, conv, func(host, info []byte) bool { return !c.base.Same(host, info) })
	if err != nil {
		return nil, 0, err
	}
	remove, err := convertWhere(prev.v, conv, func(host, _ []byte) bool { return c.base.Changed(host) })
	if err != nil {
		return nil, 0, err
	}
	t, err := prev.Table.Patch(remove, add)
	if err != nil {
		return nil, 0, err
	}
	return t, names, nil
}

// walkZones walks v, its names with name (nil: none), and returns its
// zones.
func walkZones(v Version, name func(host, info []byte) error) ([]string, error) {
	var zones []string
	err := v.Walk(name, func(z string) error {
		zones = append(zones, z)
		return nil
	})
	return zones, err
}

// convertWhere converts the names of v that pick picks.
func convertWhere(v Version, conv func(host string, raw []byte) (nametable.Entry, error), pick func(host, info []byte) bool) ([]nametable.Entry, error) {
	var es []nametable.Entry
	err := v.Walk(func(host, info []byte) error {
		if !pick(host, info) {
			return nil
		}
		e, err := conv(string(host), info)
		es = append(es, e)
		return err
	}, nil)
	return es, err
}

// converter returns the conversion of one name in wire form into an
// entry, with one NameInfo reused.
func converter(lim Limits) func(host string, raw []byte) (nametable.Entry, error) {
	info := new(namewire.NameInfo)
	return func(host string, raw []byte) (nametable.Entry, error) {
		if err := info.Unmarshal(raw); err != nil {
			return nametable.Entry{}, fmt.Errorf("%w: name %q: %v", ErrInvalidTable, host, err)
		}
		e, err := convertInfo(host, info, lim)
		if err != nil {
			return e, fmt.Errorf("%w: name %q: %v", ErrInvalidTable, host, err)
		}
		return e, nil
	}
}

// build builds the table of v for pod, feeding each converted name
// straight into the table's builder: neither the decoded table nor the
// converted entries are ever held whole (at 100,000 names they were ~40
// and ~25 MB beside the table being built, the pod's peak). The names are
// converted on a goroutine of their own (pipeBuild).
//
// The builder needs the zones before the first name. A version whose
// zones come first (the state files the discovery client writes, a
// converted table file) is built in one walk; otherwise (the control
// plane's order, and protojson's: the zones follow the names) a walk for
// the zones comes first, which also counts the names.
//
// The names the version holds (a converted table file and a table the
// discovery client received count them; else the walk for the zones does)
// size the table's index, and for a paced build (a start) pace GOGC over
// it (startPace); a version that says neither is built at buildGCPercent
// throughout.
func build(v Version, lim Limits, pod nametable.Context, paced bool) (*nametable.Table, int, error) {
	names := namesOf(v)
	var pace func(added int)
	if paced && names > 0 {
		pace = startPace(names)
	}
	t, n, err := pipeBuild(v, nil, false, names, lim, pod, pace)
	if err != errZonesLater {
		return t, n, err
	}
	var count func(host, info []byte) error
	if names == 0 {
		count = func(_, _ []byte) error { names++; return nil }
	}
	zones, err := walkZones(v, count)
	if err != nil {
		return nil, 0, err
	}
	if paced && names > 0 {
		pace = startPace(names)
	}
	return pipeBuild(v, zones, true, names, lim, pod, pace)
}

// paceEvery+1 is how many names a build adds between two calls of its
// pace.
const paceEvery = 1<<10 - 1

// errZonesLater stops a one-walk build at a name before any zone, or a
// zone after names.
var errZonesLater = fmt.Errorf("zones after names")
