package nametable

import (
	"hash/maphash"
	"unsafe"
)

// The name index maps every stored name to its node: an open-addressing
// hash table (linear probing) of uint32 slots, each holding a node ID + 1
// (0 is an empty slot) and, in its top 8 bits, 8 bits of the name's hash,
// so that a probe compares the name's bytes (in Table.text) only for one
// slot in 256 that is not the one. That is 4 bytes per slot at a load of
// at most 3/4, about 5 bytes per name, where a map[string]*node costs a
// string header and a pointer per slot, about 40 bytes per name.

const (
	slotIDBits = 24
	slotIDMask = 1<<slotIDBits - 1
)

// slotStart maps h onto [0, n) (Lemire's multiply-shift, no division).
func slotStart(h uint64, n int) int {
	return int(uint64(uint32(h)) * uint64(n) >> 32)
}

func slotTag(h uint64) uint32 { return uint32(h>>56) << slotIDBits }

// probe returns the slot holding key, or the empty slot where it would
// go, and whether key is there. len(t.slots) must be > 0.
func (t *Table) probe(key []byte, h uint64) (int, bool) {
	s := t.slots
	tag := slotTag(h)
	for i := slotStart(h, len(s)); ; {
		v := s[i]
		if v == 0 {
			return i, false
		}
		if v&^slotIDMask == tag && t.key(t.nodeAt(v&slotIDMask-1).name) == string(key) {
			return i, true
		}
		if i++; i == len(s) {
			i = 0
		}
	}
}

// lookupName returns the node stored under key (lowercase, no trailing
// dot), or nil. It allocates nothing.
func (t *Table) lookupName(key []byte) *node {
	if len(t.slots) == 0 {
		return nil
	}
	i, ok := t.probe(key, maphash.Bytes(t.seed, key))
	if !ok {
		return nil
	}
	return t.nodeAt(t.slots[i]&slotIDMask - 1)
}

// stringBytes views s as bytes, for lookups with a string key; the bytes
// must not be written.
func stringBytes(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// indexName stores node id under its own name, replacing the node there
// before, if any.
func (t *Table) indexName(id nodeID) {
	if (t.count+1)*4 > len(t.slots)*3 {
		t.resizeIndex(max(16, 2*len(t.slots)))
	}
	key := stringBytes(t.key(t.nodeAt(id).name))
	h := maphash.Bytes(t.seed, key)
	i, ok := t.probe(key, h)
	if !ok {
		t.count++
	} else {
		t.ref(t.slots[i]&slotIDMask-1, -1)
	}
	t.ref(id, 1)
	t.slots[i] = slotTag(h) | (id + 1)
}

// resizeIndex rehashes the index into n slots.
func (t *Table) resizeIndex(n int) {
	old := t.slots
	t.slots = make([]uint32, n)
	for _, v := range old {
		if v == 0 {
			continue
		}
		key := stringBytes(t.key(t.nodeAt(v&slotIDMask - 1).name))
		i := slotStart(maphash.Bytes(t.seed, key), n)
		for t.slots[i] != 0 {
			if i++; i == n {
				i = 0
			}
		}
		t.slots[i] = v
	}
}

// compactIndex shrinks the index to a load of 3/4 once the table is
// complete: growing by doubling may have left it at half that.
func (t *Table) compactIndex() {
	if n := t.count*4/3 + 1; n < len(t.slots)*4/5 {
		t.resizeIndex(n)
	}
}

// eachName calls f with every stored name and its node.
func (t *Table) eachName(f func(key string, n *node)) {
	for _, v := range t.slots {
		if v != 0 {
			n := t.nodeAt(v&slotIDMask - 1)
			f(t.key(n.name), n)
		}
	}
}

// slotOf returns the slot holding name, if it is stored.
func (t *Table) slotOf(name string) (int, bool) {
	if len(t.slots) == 0 {
		return 0, false
	}
	key := stringBytes(name)
	return t.probe(key, maphash.Bytes(t.seed, key))
}

// deleteSlot empties slot i and moves the slots after it that probing
// would no longer reach back towards their home (backward-shift deletion:
// linear probing needs no tombstones).
func (t *Table) deleteSlot(i int) {
	s := t.slots
	n := len(s)
	t.ref(s[i]&slotIDMask-1, -1)
	s[i] = 0
	t.count--
	for j := i; ; {
		if j++; j == n {
			j = 0
		}
		v := s[j]
		if v == 0 {
			return
		}
		key := stringBytes(t.key(t.nodeAt(v&slotIDMask - 1).name))
		h := slotStart(maphash.Bytes(t.seed, key), n)
		// v may fill the hole at i unless its home lies in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			s[i], s[j] = v, 0
			i = j
		}
	}
}
