package dnswire

import (
	"encoding/binary"
	"unsafe"
)

// typeCNAME is the CNAME record type (RFC 1035 3.2.2).
const typeCNAME = 5

// A DNS policy judges names in presentation form; the data plane holds
// them in wire form. These helpers convert and walk replies without
// allocating, so a judged table answer or cache hit stays at 0
// allocations.

// AppendPresentation appends the wire name to dst in presentation form
// with a trailing dot. Bytes that would change where a label ends ('.'
// and '\') are escaped with a backslash, and bytes outside printable
// ASCII as \DDD, so the policy sees the label boundaries the wire has.
// A name of plain labels fits in MaxNameLen+1 bytes; escapes may make
// append grow dst.
func AppendPresentation(dst, wire []byte) []byte {
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

// ReadName appends the name at msg[off:], following compression
// pointers, to dst in lowercased wire form, and returns it with the
// offset after the name as written at off. ok is false for a name that
// does not parse (out of bounds, a pointer loop, over 255 bytes).
func ReadName(dst, msg []byte, off int) (name []byte, next int, ok bool) {
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
			return append(dst, 0), next, len(dst) < MaxNameLen
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
			if off+1+l > len(msg) || len(dst)+1+l >= MaxNameLen {
				return nil, 0, false
			}
			dst = append(dst, byte(l))
			for _, c := range msg[off+1 : off+1+l] {
				dst = append(dst, lower(c))
			}
			off += 1 + l
		}
	}
}

// AnswerRR is one record of the answer section: where its owner name and
// its data start, its type.
type AnswerRR struct {
	Owner, RData, RDLen int
	RType               uint16
}

// NextAnswer reads the record at msg[off:]; ok is false when it does not
// parse.
func NextAnswer(msg []byte, off int) (rr AnswerRR, next int, ok bool) {
	end := SkipName(msg, off)
	if end < 0 || end+10 > len(msg) {
		return rr, 0, false
	}
	rr = AnswerRR{Owner: off, RType: binary.BigEndian.Uint16(msg[end:]), RData: end + 10,
		RDLen: int(binary.BigEndian.Uint16(msg[end+8:]))}
	if rr.RData+rr.RDLen > len(msg) {
		return rr, 0, false
	}
	return rr, rr.RData + rr.RDLen, true
}

// HasCNAME reports whether the answer section of the reply msg, whose
// question ends at qEnd, holds a CNAME record: only then is there a chain
// to judge.
func HasCNAME(msg []byte, qEnd int) bool {
	if len(msg) < HeaderLen {
		return false
	}
	an := int(binary.BigEndian.Uint16(msg[6:]))
	off := qEnd
	for range an {
		rr, next, ok := NextAnswer(msg, off)
		if !ok {
			return false
		}
		if rr.RType == typeCNAME {
			return true
		}
		off = next
	}
	return false
}

// CNAMETarget appends to dst, in lowercased wire form, the target of the
// first CNAME in the answer section of msg (its question ending at qEnd)
// whose owner is cur (lowercased wire form), and returns it; nil when no
// CNAME is owned by cur. A target that is not exactly the record's data
// (none, or a name that does not end where the data does) is the root:
// read past the data, it would be the next record's owner.
func CNAMETarget(dst, msg []byte, qEnd int, cur []byte) []byte {
	var ownBuf [MaxNameLen + 1]byte
	an := int(binary.BigEndian.Uint16(msg[6:]))
	off := qEnd
	for range an {
		rr, next, ok := NextAnswer(msg, off)
		if !ok {
			return nil
		}
		off = next
		if rr.RType != typeCNAME {
			continue
		}
		own, _, ok := ReadName(ownBuf[:0], msg, rr.Owner)
		if !ok || string(own) != string(cur) {
			continue
		}
		t, end, ok := ReadName(dst, msg, rr.RData)
		if !ok || end != rr.RData+rr.RDLen {
			t = append(dst, 0)
		}
		return t
	}
	return nil
}

// String is b without a copy; valid while b is and unchanged.
func String(b []byte) string {
	return unsafe.String(unsafe.SliceData(b), len(b))
}
