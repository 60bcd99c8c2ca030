package cache

import (
	"encoding/binary"
	"errors"
	"sync/atomic"
	"time"

	"github.com/meshdns/meshdns/internal/dnswire"
)

// Entry is one cached reply: everything after the question section, packed,
// plus where the TTL fields sit so a hit can patch them in place. An Entry is
// immutable once stored but for its hit counts (prefetch); a refresh stores
// a new Entry.
type Entry struct {
	// Flags is the header's second 16-bit word (QR, opcode, AA, TC, RD, RA,
	// rcode) written on every reply built from the entry.
	Flags uint16
	// Counts are ANCOUNT, NSCOUNT and ARCOUNT.
	Counts [3]uint16
	// Body holds the resource records that follow the question. Compression
	// pointers in it are absolute message offsets, valid because every reply
	// starts with the 12-byte header and a question of the key's length.
	Body []byte
	// TTLOffsets are the offsets in Body of each record's 32-bit TTL field.
	TTLOffsets []uint16
	// TTL is how long the entry is fresh after Stored, in seconds.
	TTL uint32
	// Stored is when the entry was made, in unix nanoseconds of the
	// resolver's clock.
	Stored int64
	// Negative marks NXDOMAIN and NODATA entries (RFC 2308).
	Negative bool

	// heat counts the entry's hits for prefetch; the only mutable part,
	// atomic.
	heat heat
	// offsets backs TTLOffsets for replies of up to inlineOffsets
	// records (nearly all): one allocation less per entry made.
	offsets [inlineOffsets]uint16
}

// inlineOffsets is how many records' TTL offsets an Entry holds without a
// slice of their own.
const inlineOffsets = 8

// heat is how often an entry is asked for, as CoreDNS's cache counts it
// for prefetch: hits in a row, each within the window of the one before.
type heat struct {
	hits       atomic.Uint32
	last       atomic.Int64 // unix nanoseconds of the last hit
	refreshing atomic.Bool  // a prefetch of this entry was started
}

// Hit counts a hit at now and returns the hits in a row, each within
// window of the previous. Concurrent hits may lose a count; prefetch needs
// an estimate, not an exact figure.
func (e *Entry) Hit(now int64, window time.Duration) uint32 {
	last := e.heat.last.Swap(now)
	if now-last > int64(window) {
		e.heat.hits.Store(1)
		return 1
	}
	return e.heat.hits.Add(1)
}

// ClaimRefresh reports true to the one caller that may prefetch the entry.
func (e *Entry) ClaimRefresh() bool { return e.heat.refreshing.CompareAndSwap(false, true) }

// ReleaseRefresh lets another prefetch of the entry start (one that could
// not run).
func (e *Entry) ReleaseRefresh() { e.heat.refreshing.Store(false) }

// InheritHeat gives e, the refresh of old, old's hits, so a hot name stays
// hot across refreshes.
func (e *Entry) InheritHeat(old *Entry) {
	e.heat.hits.Store(old.heat.hits.Load())
	e.heat.last.Store(old.heat.last.Load())
}

// ErrMalformed reports a packed message NewEntry cannot walk.
var ErrMalformed = errors.New("malformed packed message")

const headerLen = 12

// NewEntry builds an Entry from a packed reply whose question section is
// qlen bytes long. The reply must have exactly one question; its records'
// TTL offsets are found by walking the message, so any compression the
// packer used is kept.
func NewEntry(packed []byte, qlen int, ttl uint32, stored int64, negative bool) (*Entry, error) {
	if len(packed) < headerLen+qlen || len(packed) > 0xFFFF {
		return nil, ErrMalformed
	}
	if binary.BigEndian.Uint16(packed[4:]) != 1 {
		return nil, ErrMalformed
	}
	e := &Entry{
		Flags: binary.BigEndian.Uint16(packed[2:]),
		Counts: [3]uint16{
			binary.BigEndian.Uint16(packed[6:]),
			binary.BigEndian.Uint16(packed[8:]),
			binary.BigEndian.Uint16(packed[10:]),
		},
		TTL:      ttl,
		Stored:   stored,
		Negative: negative,
	}
	start := headerLen + qlen
	body := packed[start:]
	n := int(e.Counts[0]) + int(e.Counts[1]) + int(e.Counts[2])
	e.TTLOffsets = e.offsets[:0]
	if n > inlineOffsets {
		e.TTLOffsets = make([]uint16, 0, n)
	}
	off := 0
	for range n {
		if off = dnswire.SkipName(body, off); off < 0 {
			return nil, ErrMalformed
		}
		// type(2) class(2) ttl(4) rdlength(2)
		if off+10 > len(body) {
			return nil, ErrMalformed
		}
		e.TTLOffsets = append(e.TTLOffsets, uint16(off+4))
		rdlen := int(binary.BigEndian.Uint16(body[off+8:]))
		off += 10 + rdlen
		if off > len(body) {
			return nil, ErrMalformed
		}
	}
	if off != len(body) {
		return nil, ErrMalformed
	}
	e.Body = append([]byte(nil), body...)
	return e, nil
}

// Remaining returns the entry's TTL left at now and whether it is still
// fresh. A clock that steps backwards counts as no time passed.
func (e *Entry) Remaining(now int64) (uint32, bool) {
	age := now - e.Stored
	if age < 0 {
		age = 0
	}
	secs := age / 1e9
	if secs >= int64(e.TTL) {
		return 0, false
	}
	return e.TTL - uint32(secs), true
}

// Expired returns how long ago, in nanoseconds, the entry stopped being
// fresh; zero or less while it is fresh.
func (e *Entry) Expired(now int64) int64 {
	return now - (e.Stored + int64(e.TTL)*1e9)
}

// AppendTo appends a complete reply to dst: ID 0, the entry's flags, the
// question exactly as qwire (which must be as long as the question the entry
// was packed with), the records with every TTL set to ttl. It allocates only
// when dst lacks room.
func (e *Entry) AppendTo(dst, qwire []byte, ttl uint32) []byte {
	dst = append(dst,
		0, 0,
		byte(e.Flags>>8), byte(e.Flags),
		0, 1,
		byte(e.Counts[0]>>8), byte(e.Counts[0]),
		byte(e.Counts[1]>>8), byte(e.Counts[1]),
		byte(e.Counts[2]>>8), byte(e.Counts[2]),
	)
	dst = append(dst, qwire...)
	base := len(dst)
	dst = append(dst, e.Body...)
	for _, off := range e.TTLOffsets {
		binary.BigEndian.PutUint32(dst[base+int(off):], ttl)
	}
	return dst
}
