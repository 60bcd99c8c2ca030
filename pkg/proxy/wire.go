package proxy

import "encoding/binary"

// The fast path reads queries straight from the packet: a Go DNS server that
// unpacks every query into a dns.Msg and packs every reply spends about twice
// the CPU of a plain UDP reflector (issue 3), and most of that is allocation.

const (
	headerLen = 12
	// optLen is the size of the OPT record we append: root owner, type,
	// class (UDP size), TTL (extended rcode, version, flags), empty RDATA.
	optLen = 11

	// ourUDPSize is the EDNS UDP payload size we advertise: the DNS Flag Day
	// 2020 value, which avoids IP fragmentation on every common path.
	ourUDPSize = 1232
	// minUDPSize is what a client without EDNS can receive (RFC 1035 4.2.1);
	// RFC 6891 6.2.5 treats smaller advertised sizes as 512 too.
	minUDPSize = 512
	// maxNameLen is the longest name in wire form (RFC 1035 3.1).
	maxNameLen = 255

	typeOPT   = 41
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

// query is what the fast path needs from a client packet. Its slices alias
// the packet and are valid only while the packet is.
type query struct {
	id    uint16
	flags uint16
	// qwire is the question section exactly as sent: name, type, class.
	qwire []byte
	// name is the question name in wire form (a prefix of qwire).
	name   []byte
	qtype  uint16
	qclass uint16
	// edns is set when the query carried an OPT record.
	edns        bool
	ednsVersion uint8
	do          bool
	// udpSize is the largest UDP reply the client takes (512 without EDNS).
	udpSize int
}

func (q *query) opcode() int { return int(q.flags&maskOp) >> 11 }

// parseQuery reads the header, the single question and an optional OPT
// record from pkt into q without allocating.
func parseQuery(pkt []byte, q *query) parseStatus {
	if len(pkt) < headerLen {
		return parseDrop
	}
	*q = query{
		id:      binary.BigEndian.Uint16(pkt[0:]),
		flags:   binary.BigEndian.Uint16(pkt[2:]),
		udpSize: minUDPSize,
	}
	if q.flags&flagQR != 0 {
		return parseDrop
	}
	qd := binary.BigEndian.Uint16(pkt[4:])
	an := binary.BigEndian.Uint16(pkt[6:])
	ns := binary.BigEndian.Uint16(pkt[8:])
	ar := binary.BigEndian.Uint16(pkt[10:])
	if qd != 1 {
		return parseFormErr
	}
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
		off += 1 + l
		if off-headerLen >= maxNameLen {
			return parseFormErr
		}
	}
	nameEnd := off
	if off+4 > len(pkt) {
		return parseFormErr
	}
	q.name = pkt[headerLen:nameEnd]
	q.qtype = binary.BigEndian.Uint16(pkt[off:])
	q.qclass = binary.BigEndian.Uint16(pkt[off+2:])
	off += 4
	q.qwire = pkt[headerLen:off]
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
		q.edns = true
		if size := int(binary.BigEndian.Uint16(pkt[off+3:])); size > minUDPSize {
			q.udpSize = size
		}
		q.ednsVersion = pkt[off+6]
		q.do = binary.BigEndian.Uint16(pkt[off+7:])&ednsDO != 0
	}
	// Trailing bytes after the last record are ignored, as BIND and
	// CoreDNS do.
	return parseOK
}

// appendLowerName appends the wire-form name lowercased. Length octets are
// at most 63, below 'A', so the whole name can be folded byte by byte.
func appendLowerName(dst, name []byte) []byte {
	n := len(dst)
	dst = append(dst, name...)
	b := dst[n:]
	for i, c := range b {
		if c-'A' < 26 {
			b[i] = c + 'a' - 'A'
		}
	}
	return dst
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

// skipName returns the offset just past the (possibly compressed) name at
// off, or -1 when it runs past the end of msg.
func skipName(msg []byte, off int) int {
	for {
		if off >= len(msg) {
			return -1
		}
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
		default:
			off += 1 + l
		}
	}
}

// skipRR returns the offset just past the resource record at off, or -1.
func skipRR(msg []byte, off int) int {
	off = skipName(msg, off)
	if off < 0 || off+10 > len(msg) {
		return -1
	}
	end := off + 10 + int(binary.BigEndian.Uint16(msg[off+8:]))
	if end > len(msg) {
		return -1
	}
	return end
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
		off = skipName(msg, off)
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
				end := skipRR(msg, off)
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
	var flags uint16
	if do {
		flags = ednsDO
	}
	msg = append(msg, 0, 0, typeOPT, byte(ourUDPSize>>8), byte(ourUDPSize&0xff),
		byte(rcode>>4), 0, byte(flags>>8), byte(flags), 0, 0)
	ar := binary.BigEndian.Uint16(msg[10:])
	binary.BigEndian.PutUint16(msg[10:], ar+1)
	return msg
}
