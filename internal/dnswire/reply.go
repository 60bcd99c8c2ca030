package dnswire

import "encoding/binary"

// Truncate cuts the reply in msg to at most limit bytes at a record
// boundary and sets TC (RFC 1035 4.2.1, RFC 2181 9). The header and the
// question always stay. A reply that cannot be walked loses all its
// records.
func Truncate(msg []byte, limit int) []byte {
	if len(msg) <= limit {
		return msg
	}
	qd := int(binary.BigEndian.Uint16(msg[4:]))
	off := HeaderLen
	for range qd {
		off = SkipName(msg, off)
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
				end := SkipRR(msg, off)
				if end < 0 || end > limit {
					break sections
				}
				off = end
				counts[s]++
			}
		}
	} else {
		// Even the question does not fit (or does not parse): header only.
		off = HeaderLen
		binary.BigEndian.PutUint16(msg[4:], 0)
	}
	for s := range 3 {
		binary.BigEndian.PutUint16(msg[6+2*s:], counts[s])
	}
	msg[2] |= FlagTC >> 8
	return msg[:off]
}

// AppendReplyOPT appends our OPT record (EDNSSize) to a reply and counts
// it in ARCOUNT. rcode is the full 12-bit rcode: its upper 8 bits live in
// the OPT TTL (RFC 6891 6.1.3). The DO bit is echoed (RFC 3225 3).
func AppendReplyOPT(msg []byte, rcode int, do bool) []byte {
	msg = AppendOPT(msg, EDNSSize, rcode, do)
	ar := binary.BigEndian.Uint16(msg[10:])
	binary.BigEndian.PutUint16(msg[10:], ar+1)
	return msg
}
