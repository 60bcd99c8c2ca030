// Package dnswire holds the byte-level DNS helpers the data plane shares:
// walking names and records in a packed message, lowercasing a question
// without allocating, and the OPT record meshdns writes. pkg/proxy, its
// upstream Resolver and the Resolver's cache all read packets straight from
// the wire (a dns.Msg per query costs about as much CPU as the rest of the
// answer), and they must agree on every rule here.
package dnswire

import (
	"encoding/binary"
	"errors"
)

const (
	// HeaderLen is the fixed DNS header (RFC 1035 4.1.1).
	HeaderLen = 12
	// MaxNameLen is the longest name in wire form (RFC 1035 3.1).
	MaxNameLen = 255
	// MaxQuestion is the longest question section: a name, type and class.
	MaxQuestion = MaxNameLen + 4
	// EDNSSize is the EDNS UDP payload size meshdns advertises, to clients
	// and to upstreams: the DNS Flag Day 2020 value, which avoids IP
	// fragmentation on every common path.
	EDNSSize = 1232
	// MinUDPSize is what a client without EDNS can receive (RFC 1035
	// 4.2.1); RFC 6891 6.2.5 treats smaller advertised sizes as 512 too.
	MinUDPSize = 512
	// OPTLen is the size of an OPT record with no options.
	OPTLen = 11
	// TypeOPT is the OPT pseudo-record type (RFC 6891).
	TypeOPT = 41
)

// ErrBadQuestion means bytes are not one uncompressed question section.
var ErrBadQuestion = errors.New("malformed question")

// SkipName returns the offset just past the (possibly compressed) name at
// off, or -1 when it runs past the end of msg or uses a retired label type.
// A pointer ends the name, so it is never followed.
func SkipName(msg []byte, off int) int {
	for {
		if off < 0 || off >= len(msg) {
			return -1
		}
		l := int(msg[off])
		switch l & 0xC0 {
		case 0x00:
			if l == 0 {
				return off + 1
			}
			off += 1 + l
		case 0xC0:
			if off+2 > len(msg) {
				return -1
			}
			return off + 2
		default: // 0x40 and 0x80 are retired (RFC 6891 5)
			return -1
		}
	}
}

// SkipRR returns the offset just past the resource record at off, or -1.
func SkipRR(msg []byte, off int) int {
	off = SkipName(msg, off)
	if off < 0 || off+10 > len(msg) {
		return -1
	}
	end := off + 10 + int(binary.BigEndian.Uint16(msg[off+8:]))
	if end > len(msg) {
		return -1
	}
	return end
}

// LowerQuestion checks that q is one question section (uncompressed labels,
// the root label, type, class and nothing else) and writes it into key with
// ASCII letters lowercased, in one pass. It returns the name's wire length.
// It allocates nothing, so a cache key can live on the stack.
func LowerQuestion(key *[MaxQuestion]byte, q []byte) (nameLen int, err error) {
	i := 0
	for {
		if i >= len(q) {
			return 0, ErrBadQuestion
		}
		l := int(q[i])
		key[i] = byte(l)
		if l == 0 {
			i++
			break
		}
		// Compression pointers (0xC0) and the retired 0x40/0x80 label
		// types all exceed 63.
		if l > 63 {
			return 0, ErrBadQuestion
		}
		end := i + 1 + l
		if end >= MaxNameLen || end >= len(q) { // the name with its root byte fits in 255
			return 0, ErrBadQuestion
		}
		for j := i + 1; j < end; j++ {
			key[j] = lower(q[j])
		}
		i = end
	}
	if len(q) != i+4 {
		return 0, ErrBadQuestion
	}
	copy(key[i:], q[i:])
	return i, nil
}

// EqualFold compares a wire-form name with a lowercased one.
func EqualFold(name, lowered []byte) bool {
	if len(name) != len(lowered) {
		return false
	}
	for i, c := range name {
		if lower(c) != lowered[i] {
			return false
		}
	}
	return true
}

func lower(c byte) byte {
	if c-'A' < 26 {
		return c + 'a' - 'A'
	}
	return c
}

// AppendOPT appends an OPT record with no options (RFC 6891 6.1.2): the
// root owner, the given UDP payload size, the upper 8 bits of a 12-bit
// rcode, EDNS version 0, and the DO bit (RFC 3225). The caller counts it in
// ARCOUNT.
func AppendOPT(msg []byte, size uint16, rcode int, do bool) []byte {
	var flags byte
	if do {
		flags = 0x80
	}
	return append(msg, 0, 0, TypeOPT, byte(size>>8), byte(size), byte(rcode>>4), 0, flags, 0, 0, 0)
}
