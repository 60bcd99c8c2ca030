package dnswire

import "encoding/binary"

// Header bits and classes the data plane reads and writes.
const (
	ClassIN   = 1
	FlagQR    = 0x8000
	FlagAA    = 0x0400
	FlagTC    = 0x0200
	FlagRD    = 0x0100
	FlagRA    = 0x0080
	FlagCD    = 0x0010
	MaskOp    = 0x7800
	EDNSDO    = 0x8000
	RcodeMask = 0x000f
)

// Query is one client query as ParseQuery read it: the header, the single
// question (as sent, and lowercased in Key) and the OPT record's fields.
// Its slices refer to Pkt.
type Query struct {
	// Pkt holds the query; the question is Pkt[HeaderLen:QEnd].
	Pkt   []byte
	ID    uint16
	Flags uint16
	// QEnd is the end of the question section, 0 when there is none (a
	// FORMERR echoes no question); NameEnd the end of its name.
	QEnd, NameEnd int
	QType, QClass uint16
	// Key is the question lowercased: the table's answer cache and the
	// Resolver's cache are both keyed by it.
	Key [MaxQuestion]byte
	// EDNS is set when the query carried an OPT record.
	EDNS        bool
	EDNSVersion uint8
	DO          bool
	// UDPSize is the largest UDP reply the client takes (512 without EDNS).
	UDPSize int
}

// Opcode is the query's opcode.
func (q *Query) Opcode() int { return int(q.Flags&MaskOp) >> 11 }

// The question accessors below are valid when q has a question (QEnd > 0),
// which every caller past the parse checks or knows.

// QWire is the question section exactly as the client sent it.
func (q *Query) QWire() []byte { return q.Pkt[HeaderLen:q.QEnd] }

// Name is the question name in wire form, as sent; nil without a question.
func (q *Query) Name() []byte {
	if q.NameEnd == 0 {
		return nil
	}
	return q.Pkt[HeaderLen:q.NameEnd]
}

// QKey is the lowercased question: name, type, class.
func (q *Query) QKey() []byte { return q.Key[:q.QEnd-HeaderLen] }

// LName is the lowercased question name in wire form.
func (q *Query) LName() []byte { return q.Key[:q.NameEnd-HeaderLen] }

// ParseStatus says what ParseQuery made of a packet.
type ParseStatus uint8

const (
	// ParseOK: one question, at most an OPT record; the Query is filled.
	ParseOK ParseStatus = iota
	// ParseDrop: too short for a header, or a response (QR=1). Answering
	// either invites reflection loops (RFC 8906 4 allows silence).
	ParseDrop
	// ParseSlow: legal but unusual (compressed question name, records in
	// the answer or authority section, more than one additional record);
	// a full DNS library decides.
	ParseSlow
	// ParseFormErr: the question cannot be read or there is not exactly
	// one question (RFC 9619).
	ParseFormErr
)

// ParseQuery reads the header, the single question and an optional OPT
// record from pkt into q, lowercasing the question into q.Key on the way,
// without allocating. q's question refers to pkt. The fast path reads
// queries straight from the packet: a Go DNS server that unpacks every
// query into a dns.Msg and packs every reply spends about twice the CPU of
// a plain UDP reflector, and most of that is allocation.
func ParseQuery(pkt []byte, q *Query) ParseStatus {
	if len(pkt) < HeaderLen {
		return ParseDrop
	}
	q.Pkt = pkt
	q.ID = binary.BigEndian.Uint16(pkt[0:])
	q.Flags = binary.BigEndian.Uint16(pkt[2:])
	q.QEnd, q.NameEnd, q.QType, q.QClass = 0, 0, 0, 0
	q.EDNS, q.EDNSVersion, q.DO, q.UDPSize = false, 0, false, MinUDPSize
	if q.Flags&FlagQR != 0 {
		return ParseDrop
	}
	qd := binary.BigEndian.Uint16(pkt[4:])
	an := binary.BigEndian.Uint16(pkt[6:])
	ns := binary.BigEndian.Uint16(pkt[8:])
	ar := binary.BigEndian.Uint16(pkt[10:])
	if qd != 1 {
		return ParseFormErr
	}
	// The walk only checks the label lengths; the key is one copy of the
	// question and one lowercasing pass over its name (LowerName), which
	// costs half what lowercasing label by label into the key did.
	off := HeaderLen
	for {
		if off >= len(pkt) {
			return ParseFormErr
		}
		l := int(pkt[off])
		if l == 0 {
			off++
			break
		}
		if l&0xc0 != 0 {
			// A compression pointer (or a reserved label type) in the
			// question: rare enough for the slow path.
			return ParseSlow
		}
		if off += 1 + l; off-HeaderLen >= MaxNameLen {
			return ParseFormErr
		}
	}
	nameEnd := off
	if off+4 > len(pkt) {
		return ParseFormErr
	}
	LowerName(q.Key[:copy(q.Key[:], pkt[HeaderLen:off+4])-4])
	q.QType = binary.BigEndian.Uint16(pkt[off:])
	q.QClass = binary.BigEndian.Uint16(pkt[off+2:])
	off += 4
	q.NameEnd, q.QEnd = nameEnd, off
	if an != 0 || ns != 0 || ar > 1 {
		return ParseSlow
	}
	if ar == 1 {
		return parseOPT(pkt, off, q)
	}
	// Trailing bytes after the last record are ignored, as BIND and
	// CoreDNS do.
	return ParseOK
}

// parseOPT reads the query's one additional record at off, which must be
// an OPT record to stay on the fast path.
func parseOPT(pkt []byte, off int, q *Query) ParseStatus {
	// RFC 6891 6.1.2: the OPT owner is the root name.
	if off+OPTLen > len(pkt) {
		return ParseFormErr
	}
	if pkt[off] != 0 || binary.BigEndian.Uint16(pkt[off+1:]) != TypeOPT {
		return ParseSlow
	}
	rdlen := int(binary.BigEndian.Uint16(pkt[off+9:]))
	if off+OPTLen+rdlen > len(pkt) {
		return ParseFormErr
	}
	q.EDNS = true
	if size := int(binary.BigEndian.Uint16(pkt[off+3:])); size > MinUDPSize {
		q.UDPSize = size
	}
	q.EDNSVersion = pkt[off+6]
	q.DO = binary.BigEndian.Uint16(pkt[off+7:])&EDNSDO != 0
	return ParseOK
}

// LowerName lowercases the ASCII letters of a wire-form name in place,
// eight bytes at a time. Length octets (below 64) are never letters, so
// they need no skipping. For each byte b < 0x80, b+(0x80-'A') sets the
// high bit when b >= 'A' and b+(0x80-'Z'-1) when b > 'Z'; a byte with its
// own high bit set is not ASCII and left alone. No sum carries into the
// next byte: both addends are below 0x80.
func LowerName(b []byte) {
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

// InZone reports whether the lowercased wire name is zone or below it; zone
// is a lowercased wire name too.
func InZone(name, zone []byte) bool {
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
