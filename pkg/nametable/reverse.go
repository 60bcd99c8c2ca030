package nametable

import (
	"net/netip"

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

// findReverse finds key in the reverse index.
func (t *Table) findReverse(key []byte) (k [16]byte, ok bool) {
	if len(t.rev) == 0 {
		return k, false
	}
	if k, ok = parseReverse(key); !ok {
		return k, false
	}
	_, ok = t.rev[k]
	return k, ok
}

// ptrs builds the PTR records of indexed address k, one per name in the
// order the entries gave them, with each entry's TTL (its address
// records'). It allocates.
func (t *Table) ptrs(k [16]byte) []dns.RR {
	nodes := t.revMore[k]
	if nodes == nil {
		nodes = []*node{t.rev[k]}
	}
	owner := reverseName(netip.AddrFrom16(k).Unmap())
	out := make([]dns.RR, 0, len(nodes))
	for _, n := range nodes {
		out = append(out, ptrRR(owner, n.canonical, n.rrs[0].Header().Ttl))
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
