package nametable

import (
	"bytes"
	"slices"

	"github.com/meshdns/meshdns/pkg/nametable/internal/arena"
)

// What New finds out about the stored names as a whole (their empty
// non-terminals, those named like a reverse name) is noted as each name
// is stored, while its bytes are in the cache: a pass over the finished
// index read every node and name again, in an order far from the one
// they were written in, and was a third of a table's finish.

// entWalk collects, for New, the ancestors of the stored names that may be
// empty non-terminals, and the stored names that may be reverse names.
type entWalk struct {
	// ents are the ancestors inside a zone, not defined when walked,
	// by name, with their zone.
	ents map[string]string
	// last is where the previous walk stopped: the names of a
	// namespace, of a service, often come in a row.
	last string
	// reverse are the stored names of the reverse name's form.
	reverse []string
}

// stored notes that name was stored (in New; b.walk is nil in a patch,
// which keeps counts instead, patchents.go). parents is false for the
// names of endpoints: their parent is their service's name, stored with
// it, and walked then.
func (b *builder) stored(name string, parents bool) {
	w := b.walk
	if w == nil {
		return
	}
	if _, ok := parseReverse(name); ok {
		w.reverse = append(w.reverse, name)
	}
	if parents {
		b.walkUp(name, false)
	}
}

// walkUp notes the ancestors of name (and name itself with includeSelf)
// inside its zone up to the first one noted before or defined: that one's
// own walk covered what lies above it. A name defined later, or that is
// a reverse name, is dropped by addEmptyNonTerminals.
func (b *builder) walkUp(name string, includeSelf bool) {
	w := b.walk
	p := name
	if !includeSelf {
		p = parent(name)
	}
	if p == w.last && p != "" {
		return
	}
	// Most parents were noted before (a namespace's): no zone to find.
	if _, ok := w.ents[p]; ok {
		w.last = p
		return
	}
	z := b.zoneOf(name)
	if z == "" {
		return
	}
	for ; len(p) > len(z); p = parent(p) {
		if _, ok := w.ents[p]; ok || p == w.last || b.lookup(p) != nil {
			w.last = p
			return
		}
		w.ents[p] = z
	}
}

// addEmptyNonTerminals defines, inside authoritative zones, every ancestor
// of a defined name that is not defined itself (ns.svc.cluster.local,
// svc.cluster.local, the domain of a wildcard; _tcp.<service> is derived
// at query time, see findPort): such names
// exist and must get NODATA, not NXDOMAIN, or resolvers that trust RFC
// 8020 would treat the whole subtree as gone. Ancestors outside the zones
// stay unknown and are forwarded. They are few (one per namespace and a
// handful more), each a node without records.
func (b *builder) addEmptyNonTerminals() {
	t := b.t
	if b.zonesHoldReverse() {
		t.eachReverse(func(k [16]byte) { b.walkUp(revKey(k), false) })
	}
	for domain := range t.wild {
		b.walkUp(domain, true)
	}
	for name, z := range b.walk.ents {
		if b.lookup(name) != nil || b.isReverse(name) {
			continue
		}
		id, n, err := b.t.st.NewNode()
		if err != nil {
			return // a table of 16 million names: NXDOMAIN instead of NODATA
		}
		ref, _ := b.t.st.PutText("", name)
		*n = node{Head: arena.Head{Name: ref}, flags: flagNoCanon}
		b.setShape(n, b.shapeFor(z, 0, nil, nil, nil))
		t.st.Insert(id)
	}
}

// markReverse flags the stored names (an entry or zone apex named like a
// reverse name) that are also in the reverse index, so that they answer
// PTR too.
func (b *builder) markReverse() {
	t := b.t
	if len(t.rev4)+len(t.rev6) == 0 {
		return
	}
	// A name is noted twice when an entry takes over a zone apex.
	slices.Sort(b.walk.reverse)
	for _, name := range slices.Compact(b.walk.reverse) {
		if k, ok := parseReverse(name); ok && t.hasReverse(k) {
			n := b.lookup(name)
			if t.revOf == nil {
				t.revOf = make(map[uint64][][16]byte)
			}
			t.revOf[n.group()] = append(t.revOf[n.group()], k)
			t.revStored++
		}
	}
	if t.revOf == nil {
		return
	}
	// Every name of the entry answers with them, as it answers with the
	// same records.
	t.st.Each(func(_ string, n *node) {
		if ks, ok := t.revOf[n.group()]; ok {
			n.flags |= flagRev
			// Any fixed order will do for the entry in a thousand
			// tables stored under two reverse names.
			slices.SortFunc(ks, func(x, y [16]byte) int { return bytes.Compare(x[:], y[:]) })
		}
	})
}
