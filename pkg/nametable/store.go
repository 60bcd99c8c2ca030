package nametable

import (
	"errors"
	"unsafe"

	"github.com/miekg/dns"
)

// A table's nodes, records and names live in chunks that the builder fills
// as entries are added and never moves: they are written once, in their
// final place, rather than built as drafts and copied (the copy doubled
// the heap while a table was built), and chunks of a bounded size waste
// little beyond the last one, where one slice grown by doubling could
// leave half its capacity unused.

// Node IDs are positions in Table.nodes: chunk<<nodeChunkBits | index.
type nodeID = uint32

const (
	nodeChunkBits = 10
	nodeChunk     = 1 << nodeChunkBits
	// maxNodes is bounded by the name index, whose slots keep 24 bits of
	// a node ID.
	maxNodes = 1<<slotIDBits - 2
)

var errTooBig = errors.New("table over 16,777,214 names")

// nodeAt returns node id.
func (t *Table) nodeAt(id nodeID) *node {
	return &t.nodes[id>>nodeChunkBits][id&(nodeChunk-1)]
}

// A textRef is chunk<<16 | offset of a name in Table.text, stored as a
// length byte, the lowercase name and a trailing dot.
const (
	textChunkMin = 4 << 10
	textChunkMax = 64 << 10 // offsets are 16 bits
)

// key is the stored name at ref, lowercase without trailing dot. It
// shares the chunk's bytes.
func (t *Table) key(ref uint32) string {
	c := t.text[ref>>16]
	o := ref & 0xffff
	return unsafe.String(&c[o+1], int(c[o]))
}

// fqdn is the stored name at ref with its trailing dot.
func (t *Table) fqdn(ref uint32) string {
	c := t.text[ref>>16]
	o := ref & 0xffff
	return unsafe.String(&c[o+1], int(c[o])+1)
}

// An rrRef is chunk<<16 | offset of a record in Table.rrs; a node's
// records never straddle two chunks.
const (
	rrChunkMin = 64
	rrChunkMax = 4096 // 64 KiB of interface values
)

// store fills a Table's chunks.
type store struct {
	t      *Table
	nextID nodeID
}

// newNode returns a zeroed node and its ID.
func (s *store) newNode() (nodeID, *node, error) {
	id := s.nextID
	if id >= maxNodes {
		return 0, nil, errTooBig
	}
	c := int(id >> nodeChunkBits)
	if c == len(s.t.nodes) {
		s.t.nodes = append(s.t.nodes, make([]node, nodeChunk))
	}
	s.nextID++
	return id, s.t.nodeAt(id), nil
}

// putText stores prefix+name and returns its ref and FQDN form (with the
// trailing dot), which shares the chunk's bytes. Bytes once written are
// never written again, so the strings stay valid.
func (s *store) putText(prefix, name string) (ref uint32, fqdn string) {
	t := s.t
	n := len(prefix) + len(name)
	need := n + 2
	var c []byte
	if k := len(t.text); k > 0 {
		c = t.text[k-1]
	}
	if cap(c)-len(c) < need {
		size := textChunkMin
		if k := len(t.text); k > 0 {
			size = min(2*cap(t.text[k-1]), textChunkMax)
		}
		t.text = append(t.text, make([]byte, 0, size))
		c = t.text[len(t.text)-1]
	}
	off := len(c)
	c = append(c, byte(n))
	c = append(c, prefix...)
	c = append(c, name...)
	c = append(c, '.')
	t.text[len(t.text)-1] = c
	ref = uint32(len(t.text)-1)<<16 | uint32(off)
	return ref, unsafe.String(&c[off+1], n+1)
}

// putRecords reserves n contiguous records and returns them and their ref.
func (s *store) putRecords(n int) ([]dns.RR, uint32) {
	t := s.t
	var c []dns.RR
	if k := len(t.rrs); k > 0 {
		c = t.rrs[k-1]
	}
	// A table's first run may be empty (a wildcard without addresses
	// in a table without zones): it still needs a chunk to point into.
	if len(t.rrs) == 0 || cap(c)-len(c) < n {
		size := rrChunkMin
		if k := len(t.rrs); k > 0 {
			size = min(2*cap(t.rrs[k-1]), rrChunkMax)
		}
		t.rrs = append(t.rrs, make([]dns.RR, 0, max(size, n)))
		c = t.rrs[len(t.rrs)-1]
	}
	off := len(c)
	c = c[:off+n]
	t.rrs[len(t.rrs)-1] = c
	return c[off : off+n : off+n], uint32(len(t.rrs)-1)<<16 | uint32(off)
}
