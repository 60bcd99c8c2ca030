package proxy

import (
	"encoding/binary"
	"unsafe"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/policy"
)

// The policy judges names in presentation form; the handler holds them in
// wire form. These helpers convert and walk replies without allocating, so
// a judged table answer or cache hit stays at 0 allocations.

// appendPresentation appends the wire name to dst in presentation form
// with a trailing dot. Bytes that would change where a label ends ('.'
// and '\') are escaped with a backslash, and bytes outside printable
// ASCII as \DDD, so the policy sees the label boundaries the wire has.
// A name of plain labels fits in maxNameLen+1 bytes; escapes may make
// append grow dst.
func appendPresentation(dst, wire []byte) []byte {
	for off := 0; off < len(wire); {
		l := int(wire[off])
		if l == 0 || l&0xc0 != 0 || off+1+l > len(wire) {
			break
		}
		for _, c := range wire[off+1 : off+1+l] {
			switch {
			case c == '.' || c == '\\':
				dst = append(dst, '\\', c)
			case c < '!' || c > '~':
				dst = append(dst, '\\', '0'+c/100, '0'+c/10%10, '0'+c%10)
			default:
				dst = append(dst, c)
			}
		}
		dst = append(dst, '.')
		off += 1 + l
	}
	if len(dst) == 0 {
		dst = append(dst, '.')
	}
	return dst
}

// readName appends the name at msg[off:], following compression
// pointers, to dst in lowercased wire form, and returns it with the
// offset after the name as written at off. ok is false for a name that
// does not parse (out of bounds, a pointer loop, over 255 bytes).
func readName(dst, msg []byte, off int) (name []byte, next int, ok bool) {
	next = -1
	for jumps := 0; ; {
		if off >= len(msg) {
			return nil, 0, false
		}
		l := int(msg[off])
		switch {
		case l == 0:
			if next < 0 {
				next = off + 1
			}
			return append(dst, 0), next, len(dst) < maxNameLen
		case l&0xc0 == 0xc0:
			if off+1 >= len(msg) || jumps > 126 {
				return nil, 0, false
			}
			if next < 0 {
				next = off + 2
			}
			off = int(binary.BigEndian.Uint16(msg[off:]) & 0x3fff)
			jumps++
		case l&0xc0 != 0:
			return nil, 0, false
		default:
			if off+1+l > len(msg) || len(dst)+1+l >= maxNameLen {
				return nil, 0, false
			}
			dst = append(dst, byte(l))
			for _, c := range msg[off+1 : off+1+l] {
				if c-'A' < 26 {
					c += 'a' - 'A'
				}
				dst = append(dst, c)
			}
			off += 1 + l
		}
	}
}

// skipName returns the offset after the name at msg[off:] as written, or
// -1.
func skipName(msg []byte, off int) int {
	for off < len(msg) {
		l := int(msg[off])
		switch {
		case l == 0:
			return off + 1
		case l&0xc0 == 0xc0:
			if off+2 > len(msg) {
				return -1
			}
			return off + 2
		case l&0xc0 != 0:
			return -1
		}
		off += 1 + l
	}
	return -1
}

// answerRR is one record of the answer section: where its owner name and
// its data start, its type.
type answerRR struct {
	owner, rdata, rdlen int
	rtype               uint16
}

// nextAnswer reads the record at msg[off:]; ok is false when it does not
// parse.
func nextAnswer(msg []byte, off int) (rr answerRR, next int, ok bool) {
	end := skipName(msg, off)
	if end < 0 || end+10 > len(msg) {
		return rr, 0, false
	}
	rr = answerRR{owner: off, rtype: binary.BigEndian.Uint16(msg[end:]), rdata: end + 10,
		rdlen: int(binary.BigEndian.Uint16(msg[end+8:]))}
	if rr.rdata+rr.rdlen > len(msg) {
		return rr, 0, false
	}
	return rr, rr.rdata + rr.rdlen, true
}

// hasCNAME reports whether the answer section of the reply msg, whose
// question ends at qEnd, holds a CNAME record: only then is there a chain
// to judge.
func hasCNAME(msg []byte, qEnd int) bool {
	an := int(binary.BigEndian.Uint16(msg[6:]))
	off := qEnd
	for range an {
		rr, next, ok := nextAnswer(msg, off)
		if !ok {
			return false
		}
		if rr.rtype == dns.TypeCNAME {
			return true
		}
		off = next
	}
	return false
}

// judgeChain judges the CNAME chain of a forwarded reply to r, as
// policy.DecideChain does on a dns.Msg: from the question name (judged
// already), each target reached by following the CNAME whose owner is
// the current name, at most maxChainLinks, each as an outside name. The
// first denied target decides: it replaces r's verdict and judgeChain
// reports whether it blocks. Records off the chain are not judged.
func (h *Handler) judgeChain(msg []byte, r *request) bool {
	if len(msg) < headerLen || !hasCNAME(msg, r.qEnd) {
		return false
	}
	var curBuf, ownBuf, tgtBuf [maxNameLen + 1]byte
	cur := append(curBuf[:0], r.lname()...)
	an := int(binary.BigEndian.Uint16(msg[6:]))
	for range maxChainLinks {
		var target []byte
		off := r.qEnd
		for range an {
			rr, next, ok := nextAnswer(msg, off)
			if !ok {
				break
			}
			off = next
			if rr.rtype != dns.TypeCNAME {
				continue
			}
			own, _, ok := readName(ownBuf[:0], msg, rr.owner)
			if !ok || string(own) != string(cur) {
				continue
			}
			// A target that is not exactly the record's data (none, or
			// a name that does not end where the data does) is judged
			// as the root, an outside name, so the default for outside
			// names decides, as pkg/policy does for miekg's empty one;
			// read past the data, it would be the next record's owner.
			t, end, ok := readName(tgtBuf[:0], msg, rr.rdata)
			if !ok || end != rr.rdata+rr.rdlen {
				t = append(tgtBuf[:0], 0)
			}
			target = t
			break
		}
		if target == nil {
			return false
		}
		var pbuf [maxNameLen + 1]byte
		name := appendPresentation(pbuf[:0], target)
		if d := r.pol.p.DecideBytes(name, false); d.Action == policy.Deny {
			r.verdict.d, r.verdict.chain = d, string(name)
			return d.Blocks()
		}
		cur = append(curBuf[:0], target...)
	}
	return false
}

// maxChainLinks bounds the CNAME links followed, as pkg/policy does.
const maxChainLinks = 16

// presentationString is name without a copy; valid while name is.
func presentationString(name []byte) string {
	return unsafe.String(unsafe.SliceData(name), len(name))
}
