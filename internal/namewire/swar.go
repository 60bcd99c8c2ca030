package namewire

import (
	"encoding/binary"
	"math/bits"
)

// Scanning JSON eight bytes at a time: a table file is mostly string
// bodies, and testing each of their bytes alone was the largest part of
// reading one. The tests below flag, in a word of eight bytes, the high
// bit of each byte equal to (or below) a value. zeros' flags may be wrong
// above a byte rightly flagged, so only its lowest flag is sure;
// exactZeros' are all right.

const (
	ones  = 0x0101010101010101
	highs = 0x8080808080808080
)

// zeros flags the zero bytes of x.
func zeros(x uint64) uint64 { return (x - ones) & ^x & highs }

// plainASCII returns the index of the first byte of b from i on that is
// not printable ASCII or is a quote or backslash (len(b) if none).
func plainASCII(b []byte, i int) int {
	for ; i+8 <= len(b); i += 8 {
		x := binary.LittleEndian.Uint64(b[i:])
		m := zeros(x^(ones*'"')) | zeros(x^(ones*'\\')) | // quote, backslash
			(x-ones*' ')&^x&highs | // below space
			x&highs // not ASCII
		if m != 0 {
			return i + bits.TrailingZeros64(m)/8
		}
	}
	for ; i < len(b); i++ {
		if c := b[i]; c == '"' || c == '\\' || c < ' ' || c >= 0x80 {
			return i
		}
	}
	return i
}

// exactZeros flags the zero bytes of x, and only them: no borrow crosses
// bytes.
func exactZeros(x uint64) uint64 {
	const lows = ^uint64(highs)
	return ^((x&lows + lows) | x | lows)
}
