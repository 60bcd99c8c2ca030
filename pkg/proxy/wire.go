package proxy

import (
	"encoding/binary"

	"github.com/meshdns/meshdns/internal/dnswire"
)

// The fast path reads queries straight from the packet: a Go DNS server that
// unpacks every query into a dns.Msg and packs every reply spends about twice
// the CPU of a plain UDP reflector, and most of that is allocation.

const (
	headerLen  = dnswire.HeaderLen
	optLen     = dnswire.OPTLen
	ourUDPSize = dnswire.EDNSSize
	minUDPSize = dnswire.MinUDPSize
	maxNameLen = dnswire.MaxNameLen

	typeOPT   = dnswire.TypeOPT
	classIN   = 1
	flagQR    = 0x8000
	flagAA    = 0x0400
	flagTC    = 0x0200
	flagRD    = 0x0100
	flagRA    = 0x0080
	flagCD    = 0x0010
	maskOp    = 0x7800
	ednsDO    = 0x8000
	rcodeMask = 0x000f
)

// parseStatus says what the fast parser made of a packet.
type parseStatus uint8

const (
	// parseOK: one question, at most an OPT record; q is filled.
	parseOK parseStatus = iota
	// parseDrop: too short for a header, or a response (QR=1). Answering
	// either invites reflection loops (RFC 8906 4 allows silence).
	parseDrop
	// parseSlow: legal but unusual (compressed question name, records in
	// the answer or authority section, more than one additional record);
	// the miekg slow path decides.
	parseSlow
	// parseFormErr: the question cannot be read or there is not exactly
	// one question (RFC 9619).
	parseFormErr
)

// parseQuery reads the header, the single question and an optional OPT
// record from pkt into r, lowercasing the question into r.key on the way,
// without allocating. r's question refers to pkt.
func parseQuery(pkt []byte, r *request) parseStatus {
	if len(pkt) < headerLen {
		return parseDrop
	}
	r.pkt = pkt
	r.id = binary.BigEndian.Uint16(pkt[0:])
	r.flags = binary.BigEndian.Uint16(pkt[2:])
	r.qEnd, r.nameEnd, r.qtype, r.qclass = 0, 0, 0, 0
	r.edns, r.ednsVersion, r.do, r.udpSize = false, 0, false, minUDPSize
	if r.flags&flagQR != 0 {
		return parseDrop
	}
	qd := binary.BigEndian.Uint16(pkt[4:])
	an := binary.BigEndian.Uint16(pkt[6:])
	ns := binary.BigEndian.Uint16(pkt[8:])
	ar := binary.BigEndian.Uint16(pkt[10:])
	if qd != 1 {
		return parseFormErr
	}
	// The walk only checks the label lengths; the key is one copy of the
	// question and one lowercasing pass over its name (lowerName), which
	// costs half what lowercasing label by label into the key did.
	off := headerLen
	for {
		if off >= len(pkt) {
			return parseFormErr
		}
		l := int(pkt[off])
		if l == 0 {
			off++
			break
		}
		if l&0xc0 != 0 {
			// A compression pointer (or a reserved label type) in the
			// question: rare enough for the slow path.
			return parseSlow
		}
		if off += 1 + l; off-headerLen >= maxNameLen {
			return parseFormErr
		}
	}
	nameEnd := off
	if off+4 > len(pkt) {
		return parseFormErr
	}
	lowerName(r.key[:copy(r.key[:], pkt[headerLen:off+4])-4])
	r.qtype = binary.BigEndian.Uint16(pkt[off:])
	r.qclass = binary.BigEndian.Uint16(pkt[off+2:])
	off += 4
	r.nameEnd, r.qEnd = nameEnd, off
	if an != 0 || ns != 0 || ar > 1 {
		return parseSlow
	}
	if ar == 1 {
		// RFC 6891 6.1.2: the OPT owner is the root name.
		if off+optLen > len(pkt) {
			return parseFormErr
		}
		if pkt[off] != 0 || binary.BigEndian.Uint16(pkt[off+1:]) != typeOPT {
			return parseSlow
		}
		rdlen := int(binary.BigEndian.Uint16(pkt[off+9:]))
		if off+optLen+rdlen > len(pkt) {
			return parseFormErr
		}
		r.edns = true
		if size := int(binary.BigEndian.Uint16(pkt[off+3:])); size > minUDPSize {
			r.udpSize = size
		}
		r.ednsVersion = pkt[off+6]
		r.do = binary.BigEndian.Uint16(pkt[off+7:])&ednsDO != 0
	}
	// Trailing bytes after the last record are ignored, as BIND and
	// CoreDNS do.
	return parseOK
}

// lowerName lowercases the ASCII letters of a wire-form name in place,
// eight bytes at a time. Length octets (below 64) are never letters, so
// they need no skipping. For each byte b < 0x80, b+(0x80-'A') sets the
// high bit when b >= 'A' and b+(0x80-'Z'-1) when b > 'Z'; a byte with its
// own high bit set is not ASCII and left alone. No sum carries into the
// next byte: both addends are below 0x80.
func lowerName(b []byte) {
	const (
		ones  = 0x0101010101010101
		highs = 0x80 * ones
	)
	i := 0
	for ; i+8 <= len(b); i += 8 {
		w := binary.LittleEndian.Uint64(b[i:])
		low := w &^ highs
		upper := (low + (0x80-'A')*ones) &^ (low + (0x80-'Z'-1)*ones) &^ w & highs
		binary.LittleEndian.PutUint64(b[i:], w|upper>>2)
	}
	for ; i < len(b); i++ {
		if c := b[i]; c-'A' < 26 {
			b[i] = c + 'a' - 'A'
		}
	}
}

// inZone reports whether the lowercased wire name is zone or below it; zone
// is a lowercased wire name too.
func inZone(name, zone []byte) bool {
	if len(zone) == 0 || len(zone) > len(name) {
		return false
	}
	cut := len(name) - len(zone)
	for off := 0; off <= cut; off += 1 + int(name[off]) {
		if off == cut {
			return string(name[off:]) == string(zone)
		}
		if name[off] == 0 {
			return false
		}
	}
	return false
}

// truncate cuts the reply in msg to at most limit bytes at a record
// boundary and sets TC (RFC 1035 4.2.1, RFC 2181 9). The header and the
// question always stay. A reply that cannot be walked loses all its
// records.
func truncate(msg []byte, limit int) []byte {
	if len(msg) <= limit {
		return msg
	}
	qd := int(binary.BigEndian.Uint16(msg[4:]))
	off := headerLen
	for range qd {
		off = dnswire.SkipName(msg, off)
		if off < 0 || off+4 > len(msg) {
			off = -1
			break
		}
		off += 4
	}
	var counts [3]uint16
	if off >= 0 && off <= limit {
	sections:
		for s := range 3 {
			n := binary.BigEndian.Uint16(msg[6+2*s:])
			for range n {
				end := dnswire.SkipRR(msg, off)
				if end < 0 || end > limit {
					break sections
				}
				off = end
				counts[s]++
			}
		}
	} else {
		// Even the question does not fit (or does not parse): header only.
		off = headerLen
		binary.BigEndian.PutUint16(msg[4:], 0)
	}
	for s := range 3 {
		binary.BigEndian.PutUint16(msg[6+2*s:], counts[s])
	}
	msg[2] |= flagTC >> 8
	return msg[:off]
}

// appendOPT appends our OPT record to a reply and counts it. rcode is the
// full 12-bit rcode: its upper 8 bits live in the OPT TTL (RFC 6891 6.1.3).
// The DO bit is echoed (RFC 3225 3).
func appendOPT(msg []byte, rcode int, do bool) []byte {
	msg = dnswire.AppendOPT(msg, ourUDPSize, rcode, do)
	ar := binary.BigEndian.Uint16(msg[10:])
	binary.BigEndian.PutUint16(msg[10:], ar+1)
	return msg
}
