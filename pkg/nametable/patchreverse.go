package nametable

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"

	"github.com/meshdns/meshdns/pkg/nametable/internal/arena"
)

// mergeReverse builds the new table's reverse index: the old one without
// the records of removed names, merged with the added ones, in New's
// order (address, then cmpPTR).
func (p *patcher) mergeReverse() {
	t, b := p.nt, p.b
	b.sortPending(t)
	add4 := make([]uint32, len(b.pend4))
	for i, e := range b.pend4 {
		add4[i] = e.ref()
	}
	add6 := make([]uint32, len(b.pend6))
	for i, e := range b.pend6 {
		add6[i] = e.ref
	}
	b.pend4, b.pend6 = nil, nil
	var n4, n6 int
	t.rev4, n4 = mergeRev(t, p.old.rev4, add4, p.dropped, t.addr4, cmp.Compare[uint32], func(a uint32) {
		var k [16]byte
		k[10], k[11] = 0xff, 0xff
		binary.BigEndian.PutUint32(k[12:], a)
		p.addrs = append(p.addrs, k)
	})
	t.rev6, n6 = mergeRev(t, p.old.rev6, add6, p.dropped, t.addr6, func(x, y [16]byte) int {
		return bytes.Compare(x[:], y[:])
	}, func(a [16]byte) { p.addrs = append(p.addrs, a) })
	t.revAddrs = n4 + n6
	// Each family's addresses came in address order, so an address
	// touched more than once shows up in a row.
	p.addrs = slices.Compact(p.addrs)
}

// cmpRef orders two records of the reverse index: by address, then
// cmpPTR.
func cmpRef[A any](t *Table, x, y uint32, addr func(uint32) A, compare func(A, A) int) int {
	if c := compare(addr(x), addr(y)); c != 0 {
		return c
	}
	return t.cmpPTR(x, y)
}

// mergeRev merges the sorted reverse index old, without the records in
// drop, and the sorted records add, keeping one record per owner name of
// an address (the first), as uniqueRev does. It calls touch with the
// address of every record dropped or added, and returns the merged index
// and its number of distinct addresses.
func mergeRev[A comparable](t *Table, old, add []uint32, drop map[uint32]struct{}, addr func(uint32) A, compare func(A, A) int, touch func(A)) ([]uint32, int) {
	if len(add) == 0 && len(drop) == 0 {
		distinct := 0
		for i, ref := range old {
			if i == 0 || addr(old[i-1]) != addr(ref) {
				distinct++
			}
		}
		return old, distinct
	}
	out := make([]uint32, 0, len(old)+len(add))
	run, distinct := 0, 0
	var last A
	push := func(ref uint32, a A) {
		if len(out) == 0 || a != last {
			run = len(out)
			distinct++
		}
		last = a
		owner := t.rrAt(ref).Header().Name
		if slices.ContainsFunc(out[run:], func(o uint32) bool { return t.rrAt(o).Header().Name == owner }) {
			return // never the first of a run
		}
		out = append(out, ref)
	}
	i, j := 0, 0
	for i < len(old) || j < len(add) {
		if i < len(old) {
			if _, gone := drop[old[i]]; gone {
				touch(addr(old[i]))
				i++
				continue
			}
		}
		if j == len(add) || (i < len(old) && cmpRef(t, old[i], add[j], addr, compare) <= 0) {
			push(old[i], addr(old[i]))
			i++
			continue
		}
		a := addr(add[j])
		touch(a)
		push(add[j], a)
		j++
	}
	return slices.Clip(out), distinct
}

// markReverse gives the new table the PTR records of its stored names
// that are reverse names of indexed addresses (an entry or zone apex named
// like one; see builder.markReverse). Real tables have none: unless the
// old table had some or the patch touched one, there is nothing to do;
// else every name is checked again, and the nodes whose flag changes are
// copied (the old table's nodes are never written).
func (p *patcher) markReverse() error {
	t := p.nt
	need := p.old.revOf != nil
	for _, name := range p.added {
		if k, ok := parseReverse(name); ok && t.hasReverse(k) {
			need = true
		}
	}
	var buf [64 + len("ip6.arpa.")]byte
	for _, k := range p.addrs {
		if need {
			break
		}
		name := appendReverseName(buf[:0], netip.AddrFrom16(k).Unmap())
		if t.st.Lookup(name[:len(name)-1]) != nil {
			need = true
		}
	}
	t.revOf, t.revStored = nil, 0
	if !need {
		return nil
	}
	revOf := make(map[uint64][][16]byte)
	t.st.Each(func(name string, n *node) {
		if n.isENT() {
			return
		}
		if k, ok := parseReverse(name); ok && t.hasReverse(k) {
			revOf[n.group()] = append(revOf[n.group()], k)
			t.revStored++
		}
	})
	for _, ks := range revOf {
		slices.SortFunc(ks, func(x, y [16]byte) int { return bytes.Compare(x[:], y[:]) })
	}
	if len(revOf) > 0 {
		t.revOf = revOf
	}
	// Copies are made after the walk: copyNode writes the slot.
	var flip []int
	t.st.EachSlot(func(i int, _ arena.ID, n *node) {
		if _, want := revOf[n.group()]; !n.isENT() && want != n.is(flagRev) {
			flip = append(flip, i)
		}
	})
	for _, i := range flip {
		c, err := p.copyNode(i)
		if err != nil {
			return err
		}
		c.flags ^= flagRev
	}
	return nil
}

// copyNode gives the name in slot i a copy of its node, to change: the
// old table may share the node.
func (p *patcher) copyNode(i int) (*node, error) {
	t := p.nt
	oldID := t.st.At(i)
	old := t.st.Node(oldID)
	id, n, err := p.b.t.st.NewNode()
	if err != nil {
		return nil, err
	}
	*n = *old
	if old.is(flagCopy) {
		t.canonOf[n] = t.canonOf[old]
		delete(t.canonOf, old)
	}
	if old.shape == bigShape {
		t.bigShape[n] = t.bigShape[old]
		delete(t.bigShape, old)
	}
	for w, wn := range t.wild {
		if wn == old {
			t.wild[w] = n
			t.st.Ref(id, 1)
			t.st.Ref(oldID, -1)
		}
	}
	t.st.Replace(i, id)
	return n, nil
}
