package arena

import "unsafe"

// Nodes, records and names are cut from chunks of a bounded size that the
// store fills in place and never moves (invariant 1): they are written
// once, in their final place, rather than built as drafts and copied (the
// copy doubled the heap while a table was built), and chunks of a bounded
// size waste little beyond the last one, where one slice grown by
// doubling could leave half its capacity unused.

// Node returns node id.
func (s *Store[N, R]) Node(id ID) *N {
	return &s.nodes[id>>NodeChunkBits][id&(nodeChunk-1)]
}

// Next is the number of node slots used, live or not: IDs below it
// were handed out.
func (s *Store[N, R]) Next() ID { return s.next }

// NewNode returns a zeroed node and its ID.
func (s *Store[N, R]) NewNode() (ID, *N, error) {
	id := s.next
	if id >= MaxNodes {
		return 0, nil, ErrTooBig
	}
	if c := int(id >> NodeChunkBits); c == len(s.nodes) {
		s.nodes = append(s.nodes, make([]N, nodeChunk))
	}
	s.next++
	return id, s.Node(id), nil
}

// Key is the name at text reference ref, as PutText stored it without
// its trailing dot. It shares the chunk's bytes.
func (s *Store[N, R]) Key(ref uint32) string {
	c := s.text[ref>>16]
	o := ref & 0xffff
	return unsafe.String(&c[o+1], int(c[o]))
}

// FQDN is the name at ref with its trailing dot.
func (s *Store[N, R]) FQDN(ref uint32) string {
	c := s.text[ref>>16]
	o := ref & 0xffff
	return unsafe.String(&c[o+1], int(c[o])+1)
}

// PutText stores prefix+name (at most 255 bytes together) as a length
// byte, the name and a trailing dot, and returns its reference and its
// FQDN form, which shares the chunk's bytes.
func (s *Store[N, R]) PutText(prefix, name string) (ref uint32, fqdn string) {
	n := len(prefix) + len(name)
	need := n + 2
	var c []byte
	if k := len(s.text); k > 0 {
		c = s.text[k-1]
	}
	if cap(c)-len(c) < need {
		size := textChunkMin
		if k := len(s.text); k > 0 {
			size = min(2*cap(s.text[k-1]), textChunkMax)
		}
		s.text = append(s.text, make([]byte, 0, size))
		c = s.text[len(s.text)-1]
	}
	off := len(c)
	c = append(c, byte(n))
	c = append(c, prefix...)
	c = append(c, name...)
	c = append(c, '.')
	s.text[len(s.text)-1] = c
	return uint32(len(s.text)-1)<<16 | uint32(off), unsafe.String(&c[off+1], n+1)
}

// PutRecords reserves n contiguous records (at most the 65,535 a record
// reference's offset reaches) and returns them, capacity-limited, and the
// reference of the first; a run never straddles two chunks.
func (s *Store[N, R]) PutRecords(n int) ([]R, uint32) {
	var c []R
	if k := len(s.recs); k > 0 {
		c = s.recs[k-1]
	}
	// A first run may be empty (a wildcard without addresses in a table
	// without zones): it still needs a chunk to point into.
	if len(s.recs) == 0 || cap(c)-len(c) < n {
		size := recChunkMin
		if k := len(s.recs); k > 0 {
			size = min(2*cap(s.recs[k-1]), recChunkMax)
		}
		s.recs = append(s.recs, make([]R, 0, max(size, n)))
		c = s.recs[len(s.recs)-1]
	}
	off := len(c)
	c = c[:off+n]
	s.recs[len(s.recs)-1] = c
	return c[off : off+n : off+n], uint32(len(s.recs)-1)<<16 | uint32(off)
}

// Records returns the n records from ref, capacity-limited so that an
// append cannot write into the records after them.
func (s *Store[N, R]) Records(ref, n uint32) []R {
	c := s.recs[ref>>16]
	lo := ref & 0xffff
	return c[lo : lo+n : lo+n]
}

// Record returns the record at ref.
func (s *Store[N, R]) Record(ref uint32) R { return s.recs[ref>>16][ref&0xffff] }

// Chunks returns how many chunks of nodes, records and names s has, held
// or dropped.
func (s *Store[N, R]) Chunks() (nodes, recs, text int) { return len(s.nodes), len(s.recs), len(s.text) }

// Held returns how many of the first nodes, recs and text chunks s still
// holds (not dropped by Reclaim).
func (s *Store[N, R]) Held(nodes, recs, text int) (int, int, int) {
	return heldOf(s.nodes[:nodes]), heldOf(s.recs[:recs]), heldOf(s.text[:text])
}

func heldOf[T any](chunks [][]T) int {
	n := 0
	for _, c := range chunks {
		if c != nil {
			n++
		}
	}
	return n
}
