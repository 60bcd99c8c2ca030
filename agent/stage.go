package agent

import (
	"errors"
	"fmt"
	"hash/maphash"
	"runtime/debug"
	"slices"
	"strings"

	"github.com/meshdns/meshdns/agent/discovery"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// A new table that changes more than hashdiff.MaxPatchShare of the names would, built
// whole, be held beside the table serving until it is complete: two tables
// at once, the pod's peak. Applied as one patch it costs the same. So such
// a change is applied as stageCount patches of the table serving
// (nametable Table.Position, Table.PatchFrom): the old entries are cut
// into stages by where their storage lies, each stage removes the old
// entries of the next range and adds what replaces them (an entry of the
// same name; names the old table did not have come with the last stage),
// and each stage's table is served before the next is made, so the chunks
// of the old table a stage empties are freed before the next stage
// allocates. Every entry is replaced, the unchanged ones too: so every
// chunk of the old table empties, and what the change is need not be
// held while it is applied (the comparison that found it held two hashes
// per name, twice a stage's share of the table at 100,000 names).
// The entries of a stage are converted as the patch reads them, from
// walks of the old and the new content: nothing but the tables and a hash
// per old name is held.
//
// Between two stages a client may see some names at the new version and
// some at the old, for the few hundred milliseconds of the replacement.
// The version is applied (served as a version, reported by the metrics,
// ACKed to the control plane) only once the last stage is in. A stage that
// fails undoes the stages before it (in reverse, the same way), so the
// table of the last good version serves again, and the caller then builds
// the new table whole, which says whether it is valid (a change that is
// only refused staged: a name moving from one entry to another of an
// earlier stage).

// stageCount is how many patches a large change is cut into: each holds
// about 1/stageCount of a table beside the table serving.
const stageCount = 16

// stagedChange is a change of the table served to a new table, as walks of
// the two contents.
type stagedChange struct {
	// old walks every name of the table served, with its content as it
	// was applied; next walks every name of the new table, with its
	// content. Each is walked once per stage; host and raw are valid
	// during the call only.
	old, next func(each func(host string, raw []byte) error) error
	// convertOld and convertNext turn one name's content into an entry.
	convertOld, convertNext func(host string, raw []byte) (nametable.Entry, error)
	// names is the number of names of the new table, which the staged
	// table must come to.
	names int
}

// stagePlan gives each changed name its stage: the stage of its old
// entry's storage, or the last for a name the table served does not place
// (a new name, an entry that defines none). It holds one 32-bit hash per
// old name, sorted, with the stage in the low bits: at 100,000 names, a
// few hashes are shared, and a name with the hash of another takes its
// stage. That costs nothing but where its storage is freed: the old and
// the new entry of a name are of one stage whatever it is, and a new name
// may come with any.
type stagePlan struct {
	seed maphash.Seed
	keys []uint32
	// old counts the old names per stage.
	old [stageCount]int
}

const stageBits = 4 // stageCount = 1 << stageBits

func planStages(base *nametable.Table, names int, old func(each func(host string, raw []byte) error) error) (*stagePlan, error) {
	// Sized for the old names at once: grown by appends, the keys would
	// hold up to a quarter more, and twice that while growing.
	p := &stagePlan{seed: maphash.MakeSeed(), keys: make([]uint32, 0, names)}
	err := old(func(host string, _ []byte) error {
		s := stageCount - 1
		if pos, ok := base.Position(host); ok {
			s = min(int(pos*stageCount), stageCount-1)
		}
		p.keys = append(p.keys, p.hash(host)|uint32(s))
		p.old[s]++
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(p.keys)
	return p, nil
}

func (p *stagePlan) hash(host string) uint32 {
	return uint32(maphash.String(p.seed, host)) &^ (1<<stageBits - 1)
}

// stage is the stage of host.
func (p *stagePlan) stage(host string) int {
	h := p.hash(host)
	i, _ := slices.BinarySearch(p.keys, h)
	if i < len(p.keys) && p.keys[i]&^(1<<stageBits-1) == h {
		return int(p.keys[i] & (1<<stageBits - 1))
	}
	return stageCount - 1
}

// entries hands the entries of stage s that walk yields to a patch, each
// converted as the patch reads it, and counts them in n.
func (p *stagePlan) entries(s int, walk func(each func(host string, raw []byte) error) error, convert func(host string, raw []byte) (nametable.Entry, error), n *int) nametable.Entries {
	return func(each func(*nametable.Entry) error) error {
		return walk(func(host string, raw []byte) error {
			if p.stage(host) != s {
				return nil
			}
			// host may be a view of the walk's buffer; the entry
			// outlives it in the table (a wildcard's domain).
			e, err := convert(strings.Clone(host), raw)
			if err != nil {
				return fmt.Errorf("name %q: %w", host, err)
			}
			*n++
			return each(&e)
		})
	}
}

var errStagedCount = errors.New("the staged table does not come to the new table's names")

// applyStaged applies c to the table prev serves in stageCount patches,
// serving each (as prev's version) before the next, and returns the last
// table and its number of names, for the caller to serve as the new
// version. On an error the stages done are undone and the table of prev's
// version serves again. prev must not be used after the call: its table
// is dropped stage by stage.
func (ts *tables) applyStaged(prev *served, c *stagedChange) (*nametable.Table, int, error) {
	if lim := ts.limits.withDefaults(); c.names > lim.MaxNames {
		return nil, 0, fmt.Errorf("%w: %d names, more than the limit of %d", ErrInvalidTable, c.names, lim.MaxNames)
	}
	base := prev.Table
	plan, err := planStages(base, prev.Names, c.old)
	if err != nil {
		return nil, 0, err
	}
	// What the stages serve as: prev's version, whose table they hold
	// in part. prev itself (and so its whole table) is let go.
	keep := *prev
	keep.Table = nil
	prev = nil // its table must not stay reachable from this frame
	names := keep.Names
	cur := base
	base = nil
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	stageLimit() // the comparison's garbage, before the first stage
	for s := range stageCount {
		var removed, added int
		// A stage adds about what it removes (the index keeps its
		// size), but for the last: the new names come with it.
		grow := 0
		if s == stageCount-1 {
			grow = max(0, c.names-names+plan.old[s])
		}
		nt, err := cur.PatchFrom(
			plan.entries(s, c.old, c.convertOld, &removed),
			plan.entries(s, c.next, c.convertNext, &added),
			grow)
		if err == nil && s == stageCount-1 && names-removed+added != c.names {
			err = fmt.Errorf("%w: %d names, want %d", errStagedCount, names-removed+added, c.names)
		}
		if err != nil {
			ts.undoStages(keep, plan, c, cur, s)
			return nil, 0, fmt.Errorf("stage %d of %d: %w", s+1, stageCount, err)
		}
		names += added - removed
		cur = nt
		if s < stageCount-1 {
			ts.serveStage(keep, cur)
		}
	}
	return cur, names, nil
}

// serveStage serves t, a stage of a replacement, as the version of keep
// (not a version of its own: it is not ACKed or reported), and collects
// the chunks of the stage before it that t no longer uses.
func (ts *tables) serveStage(keep served, t *nametable.Table) {
	keep.Table = t
	ts.cur.Store(&keep)
	ts.publish(t)
	stageLimit()
}

// stageLimit collects what the stage before left, returns the free pages
// to the OS, and limits the memory of the next stage (changeLimit).
func stageLimit() {
	debug.FreeOSMemory()
	changeLimit()
}

// changeLimit sets a memory limit for a change applied in place (a patch,
// the stages of a replacement, and the comparison of a new table with the
// one serving that finds the change): what the runtime holds now besides
// free heap pages, plus a sixteenth of the live heap (about a stage's share
// of the table) and 1 MiB for the garbage of reading the tables. Past it
// the collector runs as often as needed and the scavenger hands freed
// pages back at once, where GOGC's headroom and pages not yet returned
// would take the process about a table above its steady size. It never
// raises the limit: a lower GOMEMLIMIT stays, and so does the limit set
// when the change began, which bounds each stage (a stage that needs more,
// such as a last one adding many new names, costs collections, not
// memory). It returns the function that restores the limit before (to
// build whole after a failed patch, under buildMemory's limit).
func changeLimit() (restore func()) {
	const changeSlack = 1 << 20
	prev := debug.SetMemoryLimit(-1)
	held, live := readHeld()
	if held == 0 {
		return func() {}
	}
	if limit := int64(held) + int64(live)/stageCount + changeSlack; limit < prev {
		debug.SetMemoryLimit(limit)
	}
	return func() { debug.SetMemoryLimit(prev) }
}

// undoStages returns cur, the table after the first done stages of plan,
// to the entries of keep's version, undoing the stages in reverse, and
// serves it. A stage undone removes what it added and adds back what it
// removed, which the table held before: it cannot be refused but by the
// table's limits, and then the table of the last stage done stays,
// marked so that the next change builds whole.
func (ts *tables) undoStages(keep served, plan *stagePlan, c *stagedChange, cur *nametable.Table, done int) {
	for s := done - 1; s >= 0; s-- {
		var n int
		nt, err := cur.PatchFrom(
			plan.entries(s, c.next, c.convertNext, &n),
			plan.entries(s, c.old, c.convertOld, &n),
			plan.old[s])
		if err != nil {
			if ts.log != nil {
				ts.log.Error("undoing a staged table replacement failed; the table serving is partly new until the next version is built whole",
					"version", keep.Version, "stage", s+1, "err", err)
			}
			keep.Partial = true
			break
		}
		cur = nt
		if s > 0 {
			ts.serveStage(keep, cur)
		}
	}
	keep.Table = cur
	ts.cur.Store(&keep)
	ts.publish(cur)
}

// wireStaged is the staged change of c, a full table from the control
// plane that replaces most of the one serving (discovery Change.Next).
func wireStaged(c discovery.Change, lim Limits) *stagedChange {
	lim = lim.withDefaults()
	conv := func(host string, raw []byte) (nametable.Entry, error) {
		info := new(namewire.NameInfo)
		if err := info.Unmarshal(raw); err != nil {
			return nametable.Entry{}, err
		}
		return convertInfo(host, info, lim)
	}
	return &stagedChange{old: c.Old, next: c.Next, convertOld: conv, convertNext: conv, names: c.Names}
}
