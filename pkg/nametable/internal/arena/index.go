package arena

import (
	"hash/maphash"
	"math/bits"
	"unsafe"
)

// The index maps every stored name to its node: an open-addressing hash
// table (linear probing) of uint32 slots, each holding a node ID + 1 (0 is
// an empty slot) and, in its top 8 bits, 8 bits of the name's hash, so
// that a probe compares the name's bytes only for one slot in 256 that is
// not the one. That is 4 bytes per slot at a load of at most 3/4, about 5
// bytes per name, where a map[string]*node costs a string header and a
// pointer per slot, about 40 bytes per name.

const (
	idBits = 24
	idMask = 1<<idBits - 1
)

// slotStart maps h onto [0, n) (Lemire's multiply-shift, no division).
func slotStart(h uint64, n int) int {
	return int(uint64(uint32(h)) * uint64(n) >> 32)
}

func slotTag(h uint64) uint32 { return uint32(h>>56) << idBits }

// nameOf is the stored name of the node in slot value v.
func (s *Store[N, R]) nameOf(v uint32) string {
	return s.Key(head(s.Node(v&idMask - 1)).Name)
}

// probe returns the slot holding key, or the empty slot where it would
// go, and whether key is there. len(s.slots) must be > 0.
func (s *Store[N, R]) probe(key []byte, h uint64) (int, bool) {
	slots := s.slots
	tag := slotTag(h)
	for i := slotStart(h, len(slots)); ; {
		v := slots[i]
		if v == 0 {
			return i, false
		}
		if v&^idMask == tag && s.nameOf(v) == string(key) {
			return i, true
		}
		if i++; i == len(slots) {
			i = 0
		}
	}
}

// Lookup returns the node stored under key, or nil. It allocates nothing.
func (s *Store[N, R]) Lookup(key []byte) *N {
	if len(s.slots) == 0 {
		return nil
	}
	i, ok := s.probe(key, maphash.Bytes(s.seed, key))
	if !ok {
		return nil
	}
	return s.Node(s.slots[i]&idMask - 1)
}

// stringBytes views str as bytes; they must not be written.
func stringBytes(str string) []byte { return unsafe.Slice(unsafe.StringData(str), len(str)) }

// Find returns the slot holding name, if it is stored.
func (s *Store[N, R]) Find(name string) (slot int, ok bool) {
	if len(s.slots) == 0 {
		return 0, false
	}
	key := stringBytes(name)
	return s.probe(key, maphash.Bytes(s.seed, key))
}

// At returns the ID of the node in slot i, which Find returned.
func (s *Store[N, R]) At(i int) ID { return s.slots[i]&idMask - 1 }

// Len is the number of names in the index.
func (s *Store[N, R]) Len() int { return s.count }

// Insert stores node id under its own name, replacing the node there
// before, if any.
func (s *Store[N, R]) Insert(id ID) {
	if (s.count+1)*4 > len(s.slots)*3 {
		s.Grow(max(16, 2*len(s.slots)))
	}
	key := stringBytes(s.Key(head(s.Node(id)).Name))
	h := maphash.Bytes(s.seed, key)
	i, ok := s.probe(key, h)
	if !ok {
		s.count++
	} else {
		s.Ref(s.At(i), -1)
	}
	s.Ref(id, 1)
	s.slots[i] = slotTag(h) | (id + 1)
}

// A Spot is where a name is or would go in the index: Find's slot with
// the name's hash, so that a caller that looked a name up can store it
// without hashing and probing again.
type Spot struct {
	slot  int
	tag   uint32
	found bool
}

// Reserve makes room for n more names: Spots taken after it stay valid
// for n Puts, until something else changes the index. expect is the
// number of names the caller expects the index to hold in the end, or 0:
// when the index must grow, it grows to hold them at a load of 3/4 (at
// least by a quarter, at most doubling), where doubling alone could
// leave it to be rehashed again by Compact.
func (s *Store[N, R]) Reserve(n, expect int) {
	need := s.count + n
	if need*4 <= len(s.slots)*3 {
		return
	}
	size := 2 * len(s.slots)
	if expect > need {
		size = min(size, max(expect*4/3+1, len(s.slots)*5/4))
	}
	s.Grow(max(16, size, need*4/3+1))
}

// SpotOf returns the spot of name and the node stored there, or nil.
// len(s.slots) must be > 0 (Reserve).
func (s *Store[N, R]) SpotOf(name string) (Spot, *N) {
	key := stringBytes(name)
	h := maphash.Bytes(s.seed, key)
	i, ok := s.probe(key, h)
	sp := Spot{slot: i, tag: slotTag(h), found: ok}
	if !ok {
		return sp, nil
	}
	return sp, s.Node(s.At(i))
}

// Put stores node id, which must be named as the spot's name, at sp, as
// Insert does.
func (s *Store[N, R]) Put(sp Spot, id ID) {
	if !sp.found {
		s.count++
	} else {
		s.Ref(s.At(sp.slot), -1)
	}
	s.Ref(id, 1)
	s.slots[sp.slot] = sp.tag | (id + 1)
}

// Replace puts node id, which must have the same name, in slot i in
// place of the node there (to give a name a changed copy of its node).
func (s *Store[N, R]) Replace(i int, id ID) {
	s.Ref(id, 1)
	s.Ref(s.At(i), -1)
	s.slots[i] = s.slots[i]&^idMask | (id + 1)
}

// Grow rehashes the index into n slots (n > Len()*4/3); the old slots
// are not written, so a fork may grow an index it shares. The names are
// hashed in the order of their IDs, the order their nodes and names lie
// in their chunks: in slot order each name cost two cache misses (its
// node, its bytes), most of the time of a rehash.
func (s *Store[N, R]) Grow(n int) {
	in := s.indexed()
	s.slots = make([]uint32, n)
	eachID(in, func(id ID) {
		h := maphash.String(s.seed, s.Key(head(s.Node(id)).Name))
		i := slotStart(h, n)
		for s.slots[i] != 0 {
			if i++; i == n {
				i = 0
			}
		}
		s.slots[i] = slotTag(h) | (id + 1)
	})
}

// indexed returns a bit per node ID below Next: set for the nodes in the
// index.
func (s *Store[N, R]) indexed() []uint64 {
	in := make([]uint64, (s.next+63)/64)
	for _, v := range s.slots {
		if v != 0 {
			id := v&idMask - 1
			in[id/64] |= 1 << (id % 64)
		}
	}
	return in
}

// eachID calls f with the ID of every bit set in in, in order.
func eachID(in []uint64, f func(id ID)) {
	for w, word := range in {
		for word != 0 {
			f(ID(w*64 + bits.TrailingZeros64(word)))
			word &= word - 1
		}
	}
}

// GrowFor grows the index to hold names at a load of 3/4, if it is
// smaller.
func (s *Store[N, R]) GrowFor(names int) {
	if n := names*4/3 + 1; n > len(s.slots) {
		s.Grow(n)
	}
}

// Compact shrinks the index to a load of 3/4 once the table is complete:
// growing by doubling may have left it at half that.
func (s *Store[N, R]) Compact() {
	if n := s.count*4/3 + 1; n < len(s.slots)*4/5 {
		s.Grow(n)
	}
}

// Each calls f with every stored name and its node, in the order of
// their IDs: slot order is a random walk through the nodes and their
// names, whose cache misses were most of a table's finish. f must not
// change the index.
func (s *Store[N, R]) Each(f func(key string, n *N)) {
	if s.count == 0 {
		return
	}
	eachID(s.indexed(), func(id ID) {
		n := s.Node(id)
		f(s.Key(head(n).Name), n)
	})
}

// EachSlot calls f with every occupied slot, its node's ID and node.
func (s *Store[N, R]) EachSlot(f func(slot int, id ID, n *N)) {
	for i, v := range s.slots {
		if v != 0 {
			f(i, v&idMask-1, s.Node(v&idMask-1))
		}
	}
}

// Delete empties slot i and moves the slots after it that probing would
// no longer reach back towards their home (backward-shift deletion:
// linear probing needs no tombstones).
func (s *Store[N, R]) Delete(i int) {
	slots := s.slots
	n := len(slots)
	s.Ref(s.At(i), -1)
	slots[i] = 0
	s.count--
	for j := i; ; {
		if j++; j == n {
			j = 0
		}
		v := slots[j]
		if v == 0 {
			return
		}
		h := slotStart(maphash.String(s.seed, s.nameOf(v)), n)
		// v may fill the hole at i unless its home lies in (i, j].
		if (j > i && (h <= i || h > j)) || (j < i && h <= i && h > j) {
			slots[i], slots[j] = v, 0
			i = j
		}
	}
}
