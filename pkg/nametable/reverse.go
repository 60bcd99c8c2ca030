package nametable

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"

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

// The reverse index is two sorted slices, v4 and v6, of references to the
// address records themselves (rrRefs): a record holds the address, and its
// owner and TTL are the PTR record's target and TTL, so an address costs 4
// bytes, where a map from address to node cost about 40. Lookups binary
// search it (PTR questions are rare).

// rrAt returns the record at ref.
func (t *Table) rrAt(ref uint32) dns.RR { return t.st.Record(ref) }

// addr4 is the address of the A record at ref, big-endian.
func (t *Table) addr4(ref uint32) uint32 {
	return binary.BigEndian.Uint32(t.rrAt(ref).(*dns.A).A.To4())
}

// addr6 is the address of the AAAA record at ref.
func (t *Table) addr6(ref uint32) (k [16]byte) {
	copy(k[:], t.rrAt(ref).(*dns.AAAA).AAAA)
	return k
}

// revRange returns the references of the records of indexed address k, in
// the index's order (see cmpPTR).
func (t *Table) revRange(k [16]byte) []uint32 {
	if netip.AddrFrom16(k).Is4In6() {
		x := binary.BigEndian.Uint32(k[12:])
		i, ok := slices.BinarySearchFunc(t.rev4, x, func(ref, x uint32) int { return cmp.Compare(t.addr4(ref), x) })
		if !ok {
			return nil
		}
		j := i + 1
		for j < len(t.rev4) && t.addr4(t.rev4[j]) == x {
			j++
		}
		return t.rev4[i:j]
	}
	i, ok := slices.BinarySearchFunc(t.rev6, k, func(ref uint32, k [16]byte) int {
		a := t.addr6(ref)
		return bytes.Compare(a[:], k[:])
	})
	if !ok {
		return nil
	}
	j := i + 1
	for j < len(t.rev6) && t.addr6(t.rev6[j]) == k {
		j++
	}
	return t.rev6[i:j]
}

// hasReverse reports whether k is in the reverse index.
func (t *Table) hasReverse(k [16]byte) bool { return len(t.revRange(k)) > 0 }

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
	for i, ref := range t.rev4 {
		a := t.addr4(ref)
		if i == 0 || t.addr4(t.rev4[i-1]) != a {
			var k [16]byte
			k[10], k[11] = 0xff, 0xff
			binary.BigEndian.PutUint32(k[12:], a)
			f(k)
		}
	}
	for i, ref := range t.rev6 {
		a := t.addr6(ref)
		if i == 0 || t.addr6(t.rev6[i-1]) != a {
			f(a)
		}
	}
}

// ptrs builds the PTR records of indexed address k, one per name in the
// index's order (see cmpPTR), with each entry's TTL (its address
// records'). It allocates.
func (t *Table) ptrs(k [16]byte) []dns.RR {
	refs := t.revRange(k)
	owner := reverseName(netip.AddrFrom16(k).Unmap())
	out := make([]dns.RR, 0, len(refs))
	for _, ref := range refs {
		h := t.rrAt(ref).Header()
		out = append(out, ptrRR(owner, h.Name, h.Ttl))
	}
	return out
}

// cmpPTR orders the records of one address in the reverse index: by
// owner name (the PTR record's target), then TTL. The order depends on
// nothing but the records, so a table answers PTR the same whatever the
// order of its entries and of the patches that made it: a replacement
// staged by position adds entries in another order than one patch does.
func (t *Table) cmpPTR(x, y uint32) int {
	hx, hy := t.rrAt(x).Header(), t.rrAt(y).Header()
	if c := strings.Compare(hx.Name, hy.Name); c != 0 {
		return c
	}
	return cmp.Compare(hx.Ttl, hy.Ttl)
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
