package upstream

import (
	"encoding/binary"
	"math"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
)

// upReply is an upstream reply a try accepted (checkReply matched it and it
// reads as DNS): its bytes and what the schedule decides on. The shapes
// nearly every upstream sends are read straight from the wire (scan);
// any other reply is unpacked by miekg as it always was, into msg. A
// dns.Msg per forwarded query was about half of a miss's allocations.
type upReply struct {
	b     []byte   // the reply as received
	bp    *[]byte  // b's buffer, from bufPool; or nil
	rcode int      // with OPT's extended bits (RFC 6891 section 6.1.3)
	edns  bool     // the reply carries OPT
	scan  wireScan // what scanReply read, when msg is nil
	msg   *dns.Msg // the reply unpacked, for a shape scanReply leaves to miekg; or nil
}

// release hands m's buffer back to bufPool; m.b is gone after it.
func (m *upReply) release() {
	if m.bp != nil {
		bufPool.Put(m.bp)
		m.bp, m.b = nil, nil
	}
}

// acceptReply reads reply b (checkReply took it as the answer to question
// q, lowercased, name nameLen bytes) from the wire, or unpacks it with
// miekg when it is not a shape scanReply knows; a reply that does not
// unpack is an error. b stays in use until the reply is released: bp, when
// not nil, is its pooled buffer, which the reply then owns.
func acceptReply(b []byte, bp *[]byte, q []byte, nameLen int) (upReply, error) {
	if s, rcode, edns, ok := scanReply(b, q, nameLen); ok {
		return upReply{b: b, bp: bp, rcode: rcode, edns: edns, scan: s}, nil
	}
	m := new(dns.Msg)
	if err := m.Unpack(b); err != nil {
		return upReply{}, err
	}
	return upReply{b: b, bp: bp, rcode: m.Rcode, edns: m.IsEdns0() != nil, msg: m}, nil
}

// wireScan is what scanReply read in a reply.
type wireScan struct {
	counts [3]uint16 // answer, authority and additional records, OPT left out
	end    int       // where the records to keep end: OPT's start, or len(b)
	minTTL uint32    // smallest TTL of the records kept; MaxUint32 without any
	soaTTL uint32    // min(TTL, MINIMUM) of the authority's first SOA
	hasSOA bool
	// spelt: an owner name is the question's name written out (not a
	// pointer to the question); makeEntry points it at the question.
	spelt bool
}

// scanReply walks reply b, the answer to q (lowercased, name nameLen
// bytes), for the shapes nearly every upstream sends: records of type A,
// AAAA, CNAME, NS, PTR and SOA, and at most one OPT record, without
// options, last in the message. It reports ok false for anything else
// (the caller unpacks it with miekg).
// It is stricter than miekg everywhere (each name as nameEnd takes it,
// rdata exactly as long as its type needs, nothing after the last record),
// so a reply it takes is one miekg unpacks into the same records, and one
// whose bytes, with the header rewritten and OPT cut off, make an entry
// meaning what miekg's repack of it meant.
func scanReply(b, q []byte, nameLen int) (s wireScan, rcode int, edns, ok bool) {
	rcode = int(b[3] & dnswire.RcodeMask)
	s.minTTL, s.end = math.MaxUint32, len(b)
	var ls labels
	ls.addName(b, dnswire.HeaderLen) // the question's, uncompressed
	off := dnswire.HeaderLen + len(q)
	for sec := range 3 {
		for range binary.BigEndian.Uint16(b[6+2*sec:]) {
			start := off
			if off = nameEnd(b, off, &ls); off < 0 || off+10 > len(b) {
				return s, 0, false, false
			}
			if !s.spelt && nameLen > 2 && b[start]&0xC0 == 0 && isName(b, start, q[:nameLen]) {
				s.spelt = true
			}
			typ := binary.BigEndian.Uint16(b[off:])
			ttl := binary.BigEndian.Uint32(b[off+4:])
			rd := off + 10
			end := rd + int(binary.BigEndian.Uint16(b[off+8:]))
			if end > len(b) {
				return s, 0, false, false
			}
			off = end
			if typ == dns.TypeOPT {
				if sec != 2 || edns || end != rd || end != len(b) {
					return s, 0, false, false
				}
				edns, s.end = true, start
				rcode |= int(ttl>>24) << 4
				continue
			}
			if !rdataOK(b, typ, rd, end, &ls) {
				return s, 0, false, false
			}
			s.counts[sec]++
			s.minTTL = min(s.minTTL, ttl)
			if sec == 1 && typ == dns.TypeSOA && !s.hasSOA {
				s.hasSOA, s.soaTTL = true, min(ttl, binary.BigEndian.Uint32(b[end-4:]))
			}
		}
	}
	return s, rcode, edns, off == len(b)
}

// rdataOK reports whether b[rd:end] is rdata scanReply takes for typ.
func rdataOK(b []byte, typ uint16, rd, end int, ls *labels) bool {
	switch typ {
	case dns.TypeA:
		return end-rd == 4
	case dns.TypeAAAA:
		return end-rd == 16
	case dns.TypeCNAME, dns.TypeNS, dns.TypePTR:
		return end > rd && nameEnd(b, rd, ls) == end
	case dns.TypeSOA: // MNAME, RNAME, five 32-bit fields
		n := nameEnd(b, rd, ls)
		return n >= 0 && end-n > 20 && nameEnd(b, n, ls) == end-20
	}
	return false
}

// maxHops bounds the compression pointers of one name nameEnd follows;
// miekg allows more, a name needing them is left to miekg.
const maxHops = 16

// labels notes where the labels of the names read so far start, the only
// places nameEnd lets a compression pointer go: a pointer anywhere else
// (the header, a TTL field) would read bytes an entry rewrites.
type labels struct {
	n  int
	at [64]uint16
}

// add notes a label at off; past its capacity it forgets it (a pointer
// to it then leaves the reply to miekg).
func (ls *labels) add(off int) {
	if ls.n < len(ls.at) {
		ls.at[ls.n], ls.n = uint16(off), ls.n+1
	}
}

// has reports whether a label starts at off.
func (ls *labels) has(off int) bool {
	for _, a := range ls.at[:ls.n] {
		if int(a) == off {
			return true
		}
	}
	return false
}

// addName notes the labels of the uncompressed name at off.
func (ls *labels) addName(msg []byte, off int) {
	for off < len(msg) && msg[off] != 0 {
		ls.add(off)
		off += 1 + int(msg[off])
	}
}

// nameEnd returns the offset just past the name at off in msg, or -1
// unless the name is one both miekg and an entry read alike: labels of at
// most 63 bytes, at most 255 bytes spelt out (miekg's bound), and
// compression pointers only to labels of names read before (ls: so they
// never read a header or TTL an entry rewrites) that each go back before
// the bytes read so far of the name (so they always end), at most maxHops
// of them. It notes the name's own labels in ls.
func nameEnd(msg []byte, off int, ls *labels) int {
	end, wire, hops, from := -1, 0, 0, off
	for off < len(msg) {
		l := int(msg[off])
		switch {
		case l == 0:
			if end < 0 {
				end = off + 1
			}
			return end
		case l <= 63:
			if wire += l + 1; wire > dnswire.MaxNameLen-1 {
				return -1
			}
			if hops == 0 {
				ls.add(off)
			}
			off += 1 + l
		case l&0xC0 == 0xC0 && off+2 <= len(msg):
			ptr := int(binary.BigEndian.Uint16(msg[off:]) & 0x3FFF)
			if hops++; hops > maxHops || ptr >= from || !ls.has(ptr) {
				return -1
			}
			if end < 0 {
				end = off + 2
			}
			off, from = ptr, ptr
		default: // retired label types, a pointer cut short
			return -1
		}
	}
	return -1
}

// isName reports whether the name at off in msg (nameEnd took it) is name
// (lowercased, uncompressed), in any case.
func isName(msg []byte, off int, name []byte) bool {
	k := 0
	for {
		l := int(msg[off])
		if l&0xC0 == 0xC0 {
			off = int(binary.BigEndian.Uint16(msg[off:]) & 0x3FFF)
			continue
		}
		if k+1+l > len(name) || !dnswire.EqualFold(msg[off:off+1+l], name[k:k+1+l]) {
			return false
		}
		if l == 0 {
			return k+1 == len(name)
		}
		off, k = off+1+l, k+1+l
	}
}

// maxCuts bounds the owner names pointQuestion points at the question; a
// reply with more is repacked by miekg.
const maxCuts = 8

// cut is an owner name pointQuestion replaced: b[from:to] became a pointer
// to the question.
type cut struct{ from, to int }

// pointQuestion appends to dst the records of reply b (scanReply took it;
// question q, name nameLen bytes; records up to end) with every owner name
// that is the question's name written out replaced by a pointer to the
// question, and every other compression pointer moved with the bytes it
// points to. A reply built from the entry then shows those owners in the
// client's spelling, as its question, the way miekg's compression made
// them. It reports false when more than maxCuts owners need it.
func pointQuestion(dst, b, q []byte, nameLen, end int) ([]byte, bool) {
	var cuts [maxCuts]cut
	n := 0
	// moved is where original offset t is in dst: inside a cut name, the
	// same byte of the question's name, which it equals.
	moved := func(t int) int {
		shift := 0
		for _, c := range cuts[:n] {
			switch {
			case t >= c.to:
				shift += c.to - c.from - 2
			case t >= c.from:
				return dnswire.HeaderLen + t - c.from
			}
		}
		return t - shift
	}
	qEnd := dnswire.HeaderLen + len(q)
	dst = append(dst, b[:qEnd]...)
	for off := qEnd; off < end; {
		if b[off]&0xC0 == 0 && isName(b, off, q[:nameLen]) {
			if n == maxCuts {
				return dst, false
			}
			e := dnswire.SkipName(b, off)
			cuts[n], n = cut{off, e}, n+1
			dst = append(dst, 0xC0, dnswire.HeaderLen)
			off = e
		} else {
			dst, off = copyName(dst, b, off, moved)
		}
		typ := binary.BigEndian.Uint16(b[off:])
		rd := off + 10
		rend := rd + int(binary.BigEndian.Uint16(b[off+8:]))
		dst = append(dst, b[off:rd]...)
		// Pointers keep their two bytes: RDLENGTH stays.
		switch typ {
		case dns.TypeCNAME, dns.TypeNS, dns.TypePTR:
			dst, _ = copyName(dst, b, rd, moved)
		case dns.TypeSOA:
			var next int
			dst, next = copyName(dst, b, rd, moved)
			dst, next = copyName(dst, b, next, moved)
			dst = append(dst, b[next:rend]...)
		default:
			dst = append(dst, b[rd:rend]...)
		}
		off = rend
	}
	return dst, true
}

// copyName appends the name at off in b (nameEnd took it) to dst, its
// pointer, if any, to moved(target), and returns the offset after it in b.
func copyName(dst, b []byte, off int, moved func(int) int) ([]byte, int) {
	for {
		l := int(b[off])
		if l&0xC0 == 0xC0 {
			t := moved(int(binary.BigEndian.Uint16(b[off:]) & 0x3FFF))
			return append(dst, 0xC0|byte(t>>8), byte(t)), off + 2
		}
		dst = append(dst, b[off:off+1+l]...)
		if off += 1 + l; l == 0 {
			return dst, off
		}
	}
}
