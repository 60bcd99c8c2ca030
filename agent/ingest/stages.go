package ingest

import (
	"errors"
	"fmt"
	"hash/maphash"
	"slices"

	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// A change of more than hashdiff.MaxPatchShare of the names, built whole,
// holds a second table beside the one serving until it is complete: at
// 100,000 Kubernetes services a change of every one peaked at 1.9 times
// the steady RSS. So the planner applies it as stageCount patches of the
// table serving instead (nametable Table.Position, Table.PatchFrom): the
// old entries are cut into stages by where their storage lies; each stage
// removes the old entries of its range and adds the new entries of the
// same names (names the old table did not have come with the last
// stage), and is served before the next is made, so the old chunks it
// empties are freed before the next stage allocates. Every entry is
// replaced, the unchanged ones too, so every old chunk empties. Entries
// are converted as the patch reads them, from walks of both versions:
// nothing is held but the tables and a byte per name (the stage plan).
//
// Between two stages a client may see some names at the new version and
// some at the old one. The version is applied (stored, reported, ACKed)
// once the last stage is in. When a stage fails the planner builds the
// new version whole, which says whether it is valid; when it is not, the
// old version is built whole again (applyStaged's caller), so the last
// good table serves.

// stageBits is log2 of stageCount, the number of patches of a large
// change: each holds about 1/stageCount of a table beside the table
// serving.
const (
	stageBits  = 4
	stageCount = 1 << stageBits
)

// stagePlan gives each name its stage: that of its old entry's storage,
// or the last for a name the table served does not place (a new name, an
// entry that defines none). It holds the stage of every name of both
// versions, by the name's place in the version's walk (a walk of a
// version always yields the same names in the same order), so a stage's
// walk finds its names without a search.
type stagePlan struct {
	old, next []uint8
}

// planStages walks both versions once: the old one for where each name's
// storage lies in base, the new one for the stage of each name, that of
// the same name in the old one. Two 32-bit hashes per old name (one
// sorted with the stage in its low bits) are held meanwhile: a name
// sharing the hash of another takes its stage, which costs nothing but
// where its storage is freed, as the old and the new entry of a name
// always share a stage.
func planStages(base *nametable.Table, oldNames, newNames int, old, next Version) (*stagePlan, error) {
	seed := maphash.MakeSeed()
	hash := func(host []byte) uint32 { return uint32(maphash.Bytes(seed, host)) &^ (stageCount - 1) }
	keys := make([]uint32, 0, oldNames)
	err := old.Walk(func(host, _ []byte) error {
		s := stageCount - 1
		if pos, ok := base.Position(string(host)); ok {
			s = min(int(pos*stageCount), stageCount-1)
		}
		keys = append(keys, hash(host)|uint32(s))
		return nil
	}, nil)
	if err != nil {
		return nil, err
	}
	// The old names take their stage through their hash too: with a
	// hash shared, the old and the new entry of a name get one stage.
	oldHashes := make([]uint32, len(keys))
	for i, k := range keys {
		oldHashes[i] = k &^ (stageCount - 1)
	}
	slices.Sort(keys)
	stage := func(h uint32) uint8 {
		if i, _ := slices.BinarySearch(keys, h); i < len(keys) && keys[i]&^(stageCount-1) == h {
			return uint8(keys[i] & (stageCount - 1))
		}
		return stageCount - 1
	}
	p := &stagePlan{old: make([]uint8, len(oldHashes)), next: make([]uint8, 0, newNames)}
	for i, h := range oldHashes {
		p.old[i] = stage(h)
	}
	err = next.Walk(func(host, _ []byte) error {
		p.next = append(p.next, stage(hash(host)))
		return nil
	}, nil)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// entries hands the entries of stage s of v, whose stages are stages, to
// a patch, each converted into one reused entry as the patch reads it,
// and counts them in n.
func entries(s int, v Version, stages []uint8, lim Limits, n *int) nametable.Entries {
	// The walk stops after the last name of the stage: the names of a
	// version walk in the order of its storage when it was built whole,
	// so the early stages end early.
	last := -1
	for i, st := range stages {
		if int(st) == s {
			last = i
		}
	}
	return func(each func(*nametable.Entry) error) error {
		if last < 0 {
			return nil
		}
		info := new(namewire.NameInfo)
		var e nametable.Entry
		i := -1
		err := v.Walk(func(host, raw []byte) error {
			if i++; i >= len(stages) {
				return errVersionChanged
			}
			if i > last {
				return errStageDone
			}
			if int(stages[i]) != s {
				return nil
			}
			if err := info.Unmarshal(raw); err != nil {
				return fmt.Errorf("%w: name %q: %v", ErrInvalidTable, host, err)
			}
			if err := convertInto(&e, string(host), info, lim); err != nil {
				return fmt.Errorf("%w: name %q: %v", ErrInvalidTable, host, err)
			}
			*n++
			return each(&e)
		}, nil)
		if err == errStageDone {
			return nil
		}
		return err
	}
}

var (
	// errVersionChanged: a version walked more names than it did before.
	errVersionChanged = errors.New("the version walks other names than before")
	// errStageDone stops the walk of a stage past its last name.
	errStageDone = errors.New("stage done")
)

// applyStaged makes the table of next, of names names, from base, the
// table of keep's version, in stageCount patches, serving each (as keep's
// version: not applied, reported or ACKed) before the next. It returns
// the last table for the caller to serve as next. On an error the table
// of a stage may be serving. The caller must hold base nowhere else
// (keep has no table), so that the chunks each stage empties are freed.
func (in *Ingest[S]) applyStaged(keep Served[S], base *nametable.Table, next Version, names int) (*nametable.Table, int, error) {
	if names > in.lim.MaxNames {
		return nil, 0, fmt.Errorf("%w: %d names, more than the limit of %d", ErrInvalidTable, names, in.lim.MaxNames)
	}
	plan, err := planStages(base, keep.Names, names, keep.v, next)
	if err != nil {
		return nil, 0, err
	}
	defer stageMemory()()
	have := keep.Names
	cur := base
	base = nil
	for s := range stageCount {
		var removed, added int
		// A stage adds about what it removes (the name index keeps its
		// size), but for the last: the new names come with it.
		grow := 0
		if s == stageCount-1 {
			grow = max(0, names-have)
		}
		nt, err := cur.PatchFrom(entries(s, keep.v, plan.old, in.lim, &removed), entries(s, next, plan.next, in.lim, &added), grow)
		if err != nil {
			return nil, 0, fmt.Errorf("stage %d of %d: %w", s+1, stageCount, err)
		}
		have += added - removed
		cur = nt
		if s < stageCount-1 {
			in.swap(keep, cur)
			stageCollect()
		}
	}
	if have != names {
		return nil, 0, fmt.Errorf("the stages came to %d names, the table has %d", have, names)
	}
	return cur, have, nil
}
