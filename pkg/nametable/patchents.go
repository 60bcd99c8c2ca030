package nametable

import (
	"maps"
	"net/netip"
	"strings"
	"unsafe"

	"github.com/meshdns/meshdns/pkg/nametable/internal/arena"
)

// A name inside a zone (below its apex) is an empty non-terminal when it
// is not defined itself (a stored name other than an empty non-terminal,
// or the reverse name of an indexed address) and something is below it: a
// defined name (reverse names count where a zone holds them) or a
// wildcard's domain, which counts for itself too. That is the set
// builder.addEmptyNonTerminals finds by walking up from every name. A
// patch keeps, per such name, how many things lie below it (Table.desc),
// so that it finds which empty non-terminals appear or go from the names
// it touched alone: a removed last child takes its empty parent with it,
// a removed name that still has children becomes one.

// eachAncestor calls f with every ancestor of name (and name itself with
// self) that lies below the apex of the closest zone holding name.
func (t *Table) eachAncestor(name string, self bool, f func(p string)) {
	z := t.zoneOf(stringBytes(name))
	if z == nil {
		return
	}
	p := name
	if !self {
		p = parent(name)
	}
	for ; len(p) > len(z.name); p = parent(p) {
		f(p)
	}
}

// holdsReverse reports whether a zone may hold reverse names.
func (t *Table) holdsReverse() bool {
	for i := range t.zones {
		if zonesHoldReverse([]string{t.zones[i].name}) {
			return true
		}
	}
	return false
}

// countBelow counts, for every name that may be an empty non-terminal, what
// lies below it (see above). The first Patch of a table from New does it
// once; later ones update the copy they inherit.
func (t *Table) countBelow() map[string]int32 {
	d := make(map[string]int32)
	if len(t.zones) == 0 {
		return d
	}
	counts := newBelowCounts(d)
	inc := func(p string) { counts.add(p, 1) }
	t.st.Each(func(k string, n *node) {
		if !n.isENT() {
			t.eachAncestor(k, false, inc)
		}
	})
	for w := range t.wild {
		t.eachAncestor(w, true, inc)
	}
	if t.holdsReverse() {
		// Reverse names are not stored: each is written into buf, and
		// its ancestors, few and shared, are looked up in keys so that
		// only the first sight of one allocates.
		keys := make(map[string]string)
		var buf []byte
		t.eachReverse(func(k [16]byte) {
			buf = appendReverseName(buf[:0], netip.AddrFrom16(k).Unmap())
			name := unsafe.String(unsafe.SliceData(buf), len(buf)-1)
			t.eachAncestor(name, false, func(p string) {
				key, ok := keys[p]
				if !ok {
					key = strings.Clone(p)
					keys[key] = key
				}
				d[key]++
			})
		})
	}
	return d
}

// belowCounts updates the counts of Table.desc. Its keys are copies that
// it shares among updates: the names counted are views of the table's
// chunks, and a key holding one (a Go map stores the key again on every
// assignment) would keep the chunk alive after the patch that removed the
// name dropped it. There are few keys (the ancestors of names).
type belowCounts struct {
	d    map[string]int32
	keys map[string]string
}

func newBelowCounts(d map[string]int32) *belowCounts {
	c := &belowCounts{d: d, keys: make(map[string]string, len(d))}
	for k := range d {
		c.keys[k] = k
	}
	return c
}

// add adds delta to the count of name, deleting it at 0.
func (c *belowCounts) add(name string, delta int32) {
	v := c.d[name] + delta
	if v <= 0 {
		delete(c.d, name)
		return
	}
	k, ok := c.keys[name]
	if !ok {
		k = strings.Clone(name)
		c.keys[k] = k
	}
	c.d[k] = v
}

// defines reports whether t stores name other than as an empty
// non-terminal.
func (t *Table) defines(name string) bool {
	n := t.st.Lookup(stringBytes(name))
	return n != nil && !n.isENT()
}

// isReverseName reports whether name is the reverse name of an indexed
// address.
func (t *Table) isReverseName(name string) bool {
	k, ok := parseReverse(name)
	return ok && t.hasReverse(k)
}

// emptyNonTerminals updates the counts for what the patch touched and
// adds or removes the empty non-terminals whose count or own name changed.
func (p *patcher) emptyNonTerminals() error {
	old, t := p.old, p.nt
	var d map[string]int32
	if old.desc != nil {
		d = maps.Clone(old.desc)
	} else {
		d = old.countBelow()
	}
	t.desc = d
	if len(t.zones) == 0 {
		return nil
	}
	counts := newBelowCounts(d)
	// The candidates are the names whose being an empty non-terminal may
	// have changed: a touched name defined before and after cannot be
	// one (most of a patch that updates entries), so it is left out.
	cands := make(map[string]struct{})
	update := func(name string, self, was, is bool) {
		if was == is {
			return
		}
		var delta int32 = 1
		if was {
			delta = -1
		}
		t.eachAncestor(name, self, func(a string) {
			counts.add(a, delta)
			cands[a] = struct{}{}
		})
	}
	for name := range p.touched {
		was, is := old.defines(name), t.defines(name)
		update(name, false, was, is)
		if !was || !is {
			cands[name] = struct{}{}
		}
	}
	for w := range p.wilds {
		update(w, true, old.wild[w] != nil, t.wild[w] != nil)
	}
	if t.holdsReverse() {
		for _, k := range p.addrs {
			name := revKey(k)
			was, is := old.hasReverse(k), t.hasReverse(k)
			update(name, false, was, is)
			if !was || !is {
				cands[name] = struct{}{}
			}
		}
	}
	for name := range cands {
		z := t.zoneOf(stringBytes(name))
		if z == nil || len(name) <= len(z.name) {
			continue
		}
		i, ok := t.st.Find(name)
		var n *node
		if ok {
			n = t.st.Node(t.st.At(i))
		}
		ent := n != nil && n.isENT()
		want := d[name] > 0 && (n == nil || ent) && !t.isReverseName(name)
		switch {
		case want && n == nil:
			id, n, err := p.b.t.st.NewNode()
			if err != nil {
				return err
			}
			ref, _ := p.b.t.st.PutText("", name)
			*n = node{Head: arena.Head{Name: ref}, flags: flagNoCanon}
			p.b.setShape(n, p.b.shapeFor(z.name, 0, nil, nil, nil))
			t.st.Insert(id)
		case !want && ent:
			t.st.Delete(i)
		}
	}
	return nil
}
