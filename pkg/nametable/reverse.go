package nametable

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"

	"github.com/miekg/dns"
)

// The reverse index replaces a stored name, node and PTR record per
// address (about 200 bytes) with one map entry: reverse names are parsed
// back into the address at query time.

// revKey is the reverse name of indexed address k, lowercase without the
// trailing dot.
func revKey(k [16]byte) string {
	s := reverseName(netip.AddrFrom16(k).Unmap())
	return s[:len(s)-1]
}

// parseReverse returns the address whose reverse name is key (lowercase,
// no trailing dot), in the index's form. Only the exact form reverseName
// writes parses (no leading zeros, one lowercase nibble per label), so
// the names found are exactly the ones a stored reverse name would be.
func parseReverse[T string | []byte](key T) (k [16]byte, ok bool) {
	const v4, v6 = ".in-addr.arpa", ".ip6.arpa"
	switch {
	case len(key) > len(v4) && string(key[len(key)-len(v4):]) == v4:
		var b [4]byte
		p := key[:len(key)-len(v4)]
		for i := 3; i >= 0; i-- {
			v, n := 0, 0
			for n < len(p) && p[n] >= '0' && p[n] <= '9' {
				v = v*10 + int(p[n]-'0')
				n++
			}
			if n == 0 || n > 3 || v > 255 || (n > 1 && p[0] == '0') {
				return k, false
			}
			b[i] = byte(v)
			p = p[n:]
			if i > 0 {
				if len(p) == 0 || p[0] != '.' {
					return k, false
				}
				p = p[1:]
			}
		}
		if len(p) != 0 {
			return k, false
		}
		return netip.AddrFrom4(b).As16(), true
	case len(key) == 63+len(v6) && string(key[63:]) == v6:
		for i := 0; i < 32; i++ {
			c := key[2*i]
			if i < 31 && key[2*i+1] != '.' {
				return k, false
			}
			var v byte
			switch {
			case c >= '0' && c <= '9':
				v = c - '0'
			case c >= 'a' && c <= 'f':
				v = c - 'a' + 10
			default:
				return k, false
			}
			// Label i is nibble 31-i: the low nibble of byte 15-i/2 first.
			if i%2 == 0 {
				k[15-i/2] |= v
			} else {
				k[15-i/2] |= v << 4
			}
		}
		// v4 addresses are indexed unmapped: their ip6.arpa form was
		// never a stored name.
		if netip.AddrFrom16(k).Is4In6() {
			return [16]byte{}, false
		}
		return k, true
	}
	return k, false
}

// rev4 and rev6 are entries of the reverse index: an address and the
// node its PTR record points at. An IPv4 address is its 4 bytes big-endian,
// so the index sorts numerically, in 8 bytes per address instead of a map
// slot of about 40.
type rev4 struct {
	addr uint32
	id   nodeID
}

type rev6 struct {
	addr [16]byte
	id   nodeID
}

// revRange returns the IDs of the nodes indexed under k, in order.
func (t *Table) revRange(k [16]byte) (v4 []rev4, v6 []rev6) {
	if a := netip.AddrFrom16(k); a.Is4In6() {
		x := binary.BigEndian.Uint32(k[12:])
		i, ok := slices.BinarySearchFunc(t.rev4, x, func(e rev4, x uint32) int { return cmp.Compare(e.addr, x) })
		if !ok {
			return nil, nil
		}
		j := i + 1
		for j < len(t.rev4) && t.rev4[j].addr == x {
			j++
		}
		return t.rev4[i:j], nil
	}
	i, ok := slices.BinarySearchFunc(t.rev6, k, func(e rev6, k [16]byte) int { return bytes.Compare(e.addr[:], k[:]) })
	if !ok {
		return nil, nil
	}
	j := i + 1
	for j < len(t.rev6) && t.rev6[j].addr == k {
		j++
	}
	return nil, t.rev6[i:j]
}

// hasReverse reports whether k is in the reverse index.
func (t *Table) hasReverse(k [16]byte) bool {
	v4, v6 := t.revRange(k)
	return len(v4)+len(v6) > 0
}

// findReverse finds key in the reverse index.
func (t *Table) findReverse(key []byte) (k [16]byte, ok bool) {
	if len(t.rev4)+len(t.rev6) == 0 {
		return k, false
	}
	if k, ok = parseReverse(key); !ok {
		return k, false
	}
	return k, t.hasReverse(k)
}

// eachReverse calls f with every distinct address of the reverse index.
func (t *Table) eachReverse(f func(k [16]byte)) {
	for i, e := range t.rev4 {
		if i == 0 || t.rev4[i-1].addr != e.addr {
			var k [16]byte
			k[10], k[11] = 0xff, 0xff
			binary.BigEndian.PutUint32(k[12:], e.addr)
			f(k)
		}
	}
	for i, e := range t.rev6 {
		if i == 0 || t.rev6[i-1].addr != e.addr {
			f(e.addr)
		}
	}
}

// ptrs builds the PTR records of indexed address k, one per name in the
// order the entries gave them, with each entry's TTL (its address
// records'). It allocates.
func (t *Table) ptrs(k [16]byte) []dns.RR {
	v4, v6 := t.revRange(k)
	owner := reverseName(netip.AddrFrom16(k).Unmap())
	out := make([]dns.RR, 0, len(v4)+len(v6))
	add := func(id nodeID) {
		n := t.nodeAt(id)
		out = append(out, ptrRR(owner, t.canonical(n), t.all(n)[0].Header().Ttl))
	}
	for _, e := range v4 {
		add(e.id)
	}
	for _, e := range v6 {
		add(e.id)
	}
	return out
}

// finishReverse sorts the reverse index, keeps one node per canonical name
// of an address (the first), and trims the slices to their length.
func (t *Table) finishReverse() {
	slices.SortStableFunc(t.rev4, func(x, y rev4) int { return cmp.Compare(x.addr, y.addr) })
	slices.SortStableFunc(t.rev6, func(x, y rev6) int { return bytes.Compare(x.addr[:], y.addr[:]) })
	t.rev4 = uniqueRev(t, t.rev4, func(e rev4) uint32 { return e.addr }, func(e rev4) nodeID { return e.id })
	t.rev6 = uniqueRev(t, t.rev6, func(e rev6) [16]byte { return e.addr }, func(e rev6) nodeID { return e.id })
	t.revAddrs = 0
	t.eachReverse(func([16]byte) { t.revAddrs++ })
}

// uniqueRev drops, within each run of one address in the sorted s, the
// entries whose node has the canonical name of an earlier one, and clips
// s when that or the appends left much spare capacity.
func uniqueRev[E any, A comparable](t *Table, s []E, addr func(E) A, id func(E) nodeID) []E {
	out := s[:0]
	run := 0 // start of the current address's run in out
	for _, e := range s {
		if len(out) > 0 && addr(out[len(out)-1]) != addr(e) {
			run = len(out)
		}
		canon := t.canonical(t.nodeAt(id(e)))
		if slices.ContainsFunc(out[run:], func(o E) bool { return t.canonical(t.nodeAt(id(o))) == canon }) {
			continue
		}
		out = append(out, e)
	}
	if cap(out)-len(out) > len(out)/8 {
		out = slices.Clone(out)
	}
	return out
}

// revNS is the SOA of a negative answer for reverse name key: the
// closest zone's, else the reverse tree's.
func (t *Table) revNS(key []byte, k [16]byte) []dns.RR {
	for i := range t.zones {
		z := &t.zones[i]
		if len(key) > len(z.name) && key[len(key)-len(z.name)-1] == '.' && string(key[len(key)-len(z.name):]) == z.name {
			return z.soa
		}
	}
	if netip.AddrFrom16(k).Is4In6() {
		return t.revNs[0]
	}
	return t.revNs[1]
}
