// Package hashdiff finds what a new version of a keyed table changes in the
// last one while holding only two 64-bit hashes per name of the last one,
// not its names or content: the agent compares a table of 100,000 names
// this way without a second table beside the one it serves.
//
// Hashes are maphash with a random seed per Base; equal hashes are taken
// as equal. A collision of two names makes the caller's patch define a
// name twice or come to another number of names than the new table has,
// which callers check, then build the table whole.
package hashdiff

import (
	"hash/maphash"
	"slices"
)

// Base is the last version of a table, as hashes. Add every name, then
// Seal, then Match the new version's names; Changed and Left then tell
// what went away or was replaced. Not safe for concurrent use.
type Base struct {
	seed    maphash.Seed
	e       []entry // sorted by name hash once sealed
	matched []bool  // by index in e: the name is in the new version, unchanged
	left    int     // names of e not matched
}

type entry struct{ name, content uint64 }

// New returns an empty Base; sizeHint is the expected number of names, or 0.
func New(sizeHint int) *Base {
	return &Base{seed: maphash.MakeSeed(), e: make([]entry, 0, sizeHint)}
}

// Add records a name of the last version and its content bytes.
func (b *Base) Add(name, content []byte) { b.add(maphash.Bytes(b.seed, name), content) }

// AddString is Add of a name held as a string (a name hashes the same
// either way).
func (b *Base) AddString(name string, content []byte) { b.add(maphash.String(b.seed, name), content) }

func (b *Base) add(name uint64, content []byte) {
	b.e = append(b.e, entry{name, maphash.Bytes(b.seed, content)})
}

// Seal ends the Adds. Before it Match, Changed and Left are undefined.
func (b *Base) Seal() {
	b.e = slices.Clip(b.e)
	slices.SortFunc(b.e, func(x, y entry) int {
		switch {
		case x.name < y.name:
			return -1
		case x.name > y.name:
			return 1
		}
		return 0
	})
	b.matched = make([]bool, len(b.e))
	b.left = len(b.e)
}

// Len is the number of names added.
func (b *Base) Len() int { return len(b.e) }

// find returns the index of name's hash in e, or -1.
func (b *Base) find(h uint64) int {
	i, ok := slices.BinarySearchFunc(b.e, h, func(x entry, h uint64) int {
		switch {
		case x.name < h:
			return -1
		case x.name > h:
			return 1
		}
		return 0
	})
	if !ok {
		return -1
	}
	return i
}

// Match reports whether name of the new version is in the base with the
// same content, and if so marks it unchanged: neither removed nor added.
func (b *Base) Match(name, content []byte) bool { return b.match(maphash.Bytes(b.seed, name), content) }

// MatchString is Match of a name held as a string.
func (b *Base) MatchString(name string, content []byte) bool {
	return b.match(maphash.String(b.seed, name), content)
}

func (b *Base) match(name uint64, content []byte) bool {
	i := b.find(name)
	if i < 0 || b.matched[i] || b.e[i].content != maphash.Bytes(b.seed, content) {
		return false
	}
	b.matched[i] = true
	b.left--
	return true
}

// Same reports whether name is in the base with the same content, as
// Match does, without marking it: for walks of the new version after the
// Matches (each name of the new version is either Same, or added or
// replaced).
func (b *Base) Same(name, content []byte) bool { return b.same(maphash.Bytes(b.seed, name), content) }

// SameString is Same of a name held as a string.
func (b *Base) SameString(name string, content []byte) bool {
	return b.same(maphash.String(b.seed, name), content)
}

func (b *Base) same(name uint64, content []byte) bool {
	i := b.find(name)
	return i >= 0 && b.e[i].content == maphash.Bytes(b.seed, content)
}

// Changed reports whether a name of the base was not matched unchanged:
// the new version removed or replaced it.
func (b *Base) Changed(name []byte) bool { return b.changed(maphash.Bytes(b.seed, name)) }

// ChangedString is Changed of a name held as a string.
func (b *Base) ChangedString(name string) bool { return b.changed(maphash.String(b.seed, name)) }

func (b *Base) changed(name uint64) bool {
	i := b.find(name)
	return i >= 0 && !b.matched[i]
}

// Left is the number of names of the base not matched unchanged.
func (b *Base) Left() int { return b.left }

// MaxPatchShare is the share of a base's names a new version may change
// for the agent to apply it as one patch of the table it serves; past it
// the agent builds the table whole (a patch of much of a table holds as
// much beside it as a second table would).
const MaxPatchShare = 0.25

// Small reports whether a new version of which changed names did not Match
// (added or replaced) changes at most MaxPatchShare of the base: both its
// names not matched and the base's names it removed or replaced (Left).
func (b *Base) Small(changed int) bool {
	limit := int(float64(b.Len())*MaxPatchShare) + 1
	return changed <= limit && b.left <= limit
}
