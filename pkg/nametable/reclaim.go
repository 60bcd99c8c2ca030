package nametable

import (
	"strings"
	"unsafe"
)

// A patched table shares the chunks of the table it came from, and the
// names a patch removes leave their nodes, records and text behind in
// them. A chunk none of the table's names uses any more is dropped from
// the table (its slot set to nil): once the tables that still use it are
// gone, the garbage collector frees it. So a table replaced by a sequence
// of patches, each removing the names that lie in the next few chunks
// (Position), never holds much more than one table: the chunks the last
// patch emptied are freed before the next patch adds its share.
//
// Nothing moves: node IDs and chunk references stay what they are, and no
// live name refers to a dropped chunk.

// liveCounts counts, per chunk of Table.nodes, Table.rrs and Table.text,
// the references the table's names hold into it: every node in the name
// index or the wildcard map counts once in the chunk of its node, once in
// that of its name and once in that of its first record. A table of
// 100,000 names has about 200 chunks: the counts are copied per patch,
// like the side maps.
type liveCounts struct {
	nodes, rrs, text []int32
}

func (l *liveCounts) clone() *liveCounts {
	return &liveCounts{nodes: cloneCounts(l.nodes), rrs: cloneCounts(l.rrs), text: cloneCounts(l.text)}
}

// cloneCounts copies s with room for the chunks a patch appends.
func cloneCounts(s []int32) []int32 { return append(make([]int32, 0, len(s)+4), s...) }

// bump adds d to s[i], growing s as needed.
func bump(s *[]int32, i uint32, d int32) {
	for uint32(len(*s)) <= i {
		*s = append(*s, 0)
	}
	(*s)[i] += d
}

// ref adds d to the counts of the chunks node id refers to. Only patched
// tables count (t.live set by fork); New's builder does not.
func (t *Table) ref(id nodeID, d int32) {
	if t.live != nil {
		t.live.ref(t, id, d)
	}
}

// ref adds d to the counts of the chunks of t's node id.
func (l *liveCounts) ref(t *Table, id nodeID, d int32) {
	n := t.nodeAt(id)
	bump(&l.nodes, id>>nodeChunkBits, d)
	bump(&l.text, n.name>>16, d)
	// Even a node without records keeps its record reference in
	// range of its chunk (Table.all slices it).
	bump(&l.rrs, n.rr>>16, d)
}

// countLive counts the references of t's names (for the first patch of a
// table from New: later ones copy the counts they inherit). It only reads
// t: tables are shared, and several patches of one table may run at once.
func (t *Table) countLive() *liveCounts {
	l := &liveCounts{
		nodes: make([]int32, len(t.nodes), len(t.nodes)+4),
		rrs:   make([]int32, len(t.rrs), len(t.rrs)+4),
		text:  make([]int32, len(t.text), len(t.text)+4),
	}
	for _, v := range t.slots {
		if v != 0 {
			l.ref(t, v&slotIDMask-1, 1)
		}
	}
	for _, n := range t.wild {
		if id, ok := t.idOf(n); ok {
			l.ref(t, id, 1)
		}
	}
	return l
}

// idOf returns the ID of node n, which must be one of t's chunks. It
// scans the chunks: for the wildcards alone, which the index does not
// hold.
func (t *Table) idOf(n *node) (nodeID, bool) {
	p := uintptr(unsafe.Pointer(n))
	size := unsafe.Sizeof(node{})
	for c, ch := range t.nodes {
		if len(ch) == 0 {
			continue
		}
		lo := uintptr(unsafe.Pointer(&ch[0]))
		if p >= lo && p < lo+uintptr(len(ch))*size {
			return nodeID(c)<<nodeChunkBits | nodeID((p-lo)/size), true
		}
	}
	return 0, false
}

// reclaim drops the chunks no name refers to, except the last of each
// kind, which the next patch may append to.
func (t *Table) reclaim() {
	l := t.live
	for c := range len(t.nodes) - 1 {
		if c >= len(l.nodes) || l.nodes[c] == 0 {
			t.nodes[c] = nil
		}
	}
	for c := range len(t.rrs) - 1 {
		if c >= len(l.rrs) || l.rrs[c] == 0 {
			t.rrs[c] = nil
		}
	}
	for c := range len(t.text) - 1 {
		if c >= len(l.text) || l.text[c] == 0 {
			t.text[c] = nil
		}
	}
}

// heldNodes is the number of node slots t holds: those below nextID in
// chunks not dropped.
func (t *Table) heldNodes() int {
	held := int(t.nextID)
	for c, ch := range t.nodes {
		if ch == nil && nodeID(c)<<nodeChunkBits < t.nextID {
			held -= min(nodeChunk, int(t.nextID-nodeID(c)<<nodeChunkBits))
		}
	}
	return held
}

// Position says where the storage of the entry named host lies in t: a
// share in [0, 1), in the order the table's storage was filled (New fills
// it in the order of its entries, a patch appends). The chunks that a
// patch removing the entries of one range of positions empties are
// dropped from the table it returns, so a caller replacing most of a
// table in several patches, each removing the entries of the next range
// (and adding what replaces them), frees the old table's memory as it
// goes instead of holding two tables at once.
//
// ok is false when host is not the hostname of an entry that defines
// names in t (an entry without addresses, endpoints or canonical name
// defines none; removing it changes nothing).
func (t *Table) Position(host string) (share float64, ok bool) {
	if t == nil || t.nextID == 0 {
		return 0, false
	}
	name, err := normalizeName(host, true)
	if err != nil {
		return 0, false
	}
	var id nodeID
	if w, wild := strings.CutPrefix(name, "*."); wild {
		n := t.wild[w]
		if n == nil {
			return 0, false
		}
		if id, ok = t.idOf(n); !ok {
			return 0, false
		}
	} else {
		i, found := t.slotOf(name)
		if !found {
			return 0, false
		}
		id = t.slots[i]&slotIDMask - 1
		if n := t.nodeAt(id); n.is(flagNoCanon) || n.isVersion() {
			return 0, false
		}
	}
	return float64(id) / float64(t.nextID), true
}
