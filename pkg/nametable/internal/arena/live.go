package arena

import (
	"slices"
	"unsafe"
)

// A forked store shares the chunks of the store it came from, and the
// nodes the table removes leave their node, records and name behind in
// them. A chunk none of the table's names uses any more is dropped from
// the store (its slot set to nil, invariant 5): once the stores that still
// use it are gone, the garbage collector frees it. So a table replaced by
// a sequence of patches, each removing the names that lie in the next few
// chunks, never holds much more than one table.

// counts are, per chunk of nodes, records and names, the references the
// counted nodes hold into it. A table of 100,000 names has about 200
// chunks: the counts are copied per fork.
type counts struct {
	nodes, recs, text []int32
}

func (c *counts) clone() *counts {
	return &counts{nodes: cloneCounts(c.nodes), recs: cloneCounts(c.recs), text: cloneCounts(c.text)}
}

// cloneCounts copies s with room for the chunks a fork appends.
func cloneCounts(s []int32) []int32 { return append(make([]int32, 0, len(s)+4), s...) }

// bump adds d to s[i], growing s as needed.
func bump(s *[]int32, i uint32, d int32) {
	for uint32(len(*s)) <= i {
		*s = append(*s, 0)
	}
	(*s)[i] += d
}

// Ref adds d to the counts of the chunks node id refers to: +1 for a node
// the table starts to use outside the index (a wildcard), -1 when it
// stops. The index counts its own nodes. Only forked stores count.
func (s *Store[N, R]) Ref(id ID, d int32) {
	if s.live != nil {
		s.tally(s.live, id, d)
	}
}

// tally adds d to c's counts of the chunks node id refers to.
func (s *Store[N, R]) tally(c *counts, id ID, d int32) {
	h := head(s.Node(id))
	bump(&c.nodes, id>>NodeChunkBits, d)
	bump(&c.text, h.Name>>16, d)
	// Even a node without records keeps its record reference in range
	// of its chunk (Records slices it).
	bump(&c.recs, h.RR>>16, d)
}

// IDOf returns the ID of n, which must be a node of s, by scanning the
// node chunks: for the few nodes the table keeps outside the index.
func (s *Store[N, R]) IDOf(n *N) (ID, bool) {
	p := uintptr(unsafe.Pointer(n))
	size := unsafe.Sizeof(*n)
	for c, ch := range s.nodes {
		if len(ch) == 0 {
			continue
		}
		lo := uintptr(unsafe.Pointer(&ch[0]))
		if p >= lo && p < lo+uintptr(len(ch))*size {
			return ID(c)<<NodeChunkBits | ID((p-lo)/size), true
		}
	}
	return 0, false
}

// Fork returns a store that shares s's chunks and owns copies of what
// changes in place: the chunk lists, the index (sized for extra more
// names) and the counts. With tip (Claim succeeded) it appends to the
// tails of s's last chunks; else it starts chunks of its own (invariant
// 2). others are the nodes the table uses outside the index, counted when
// s has no counts yet (a store from New counts nothing while it is
// built). s is only read: several forks of one store may be made at once.
func (s *Store[N, R]) Fork(tip bool, extra int, others []*N) Store[N, R] {
	f := *s
	f.nodes = slices.Clone(s.nodes)
	f.recs = slices.Clone(s.recs)
	f.text = slices.Clone(s.text)
	if !tip {
		if k := len(f.recs); k > 0 {
			f.recs[k-1] = slices.Clip(f.recs[k-1])
		}
		if k := len(f.text); k > 0 {
			f.text[k-1] = slices.Clip(f.text[k-1])
		}
		f.next = ID(len(f.nodes)) << NodeChunkBits
	}
	if s.live != nil {
		f.live = s.live.clone()
	} else {
		f.live = s.countLive(others)
	}
	if n := (s.count+extra)*4/3 + 1; n > len(s.slots) {
		f.Grow(n) // reads s's slots, writes a new index
	} else {
		f.slots = slices.Clone(s.slots)
	}
	return f
}

// countLive counts the references of s's indexed nodes and others.
func (s *Store[N, R]) countLive(others []*N) *counts {
	c := &counts{
		nodes: make([]int32, len(s.nodes), len(s.nodes)+4),
		recs:  make([]int32, len(s.recs), len(s.recs)+4),
		text:  make([]int32, len(s.text), len(s.text)+4),
	}
	for _, v := range s.slots {
		if v != 0 {
			s.tally(c, v&idMask-1, 1)
		}
	}
	for _, n := range others {
		if id, ok := s.IDOf(n); ok {
			s.tally(c, id, 1)
		}
	}
	return c
}

// Reclaim drops the chunks no counted node refers to, except the last of
// each kind, which a next fork may append to.
func (s *Store[N, R]) Reclaim() {
	reclaim(s.nodes, s.live.nodes)
	reclaim(s.recs, s.live.recs)
	reclaim(s.text, s.live.text)
}

func reclaim[T any](chunks [][]T, live []int32) {
	for c := range len(chunks) - 1 {
		if c >= len(live) || live[c] == 0 {
			chunks[c] = nil
		}
	}
}

// HeldNodes is the number of node slots s holds: those below Next in
// chunks not dropped.
func (s *Store[N, R]) HeldNodes() int {
	held := int(s.next)
	for c, ch := range s.nodes {
		if ch == nil && ID(c)<<NodeChunkBits < s.next {
			held -= min(nodeChunk, int(s.next-ID(c)<<NodeChunkBits))
		}
	}
	return held
}
