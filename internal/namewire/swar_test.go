package namewire

import (
	"bytes"
	"testing"
)

// The word-at-a-time scans find what a byte-by-byte scan finds, for every
// pair of byte values side by side at every offset of a word (a flag's
// borrow reaches the byte above it) and in the tail.
func TestWordScans(t *testing.T) {
	naivePlain := func(b []byte, i int) int {
		for ; i < len(b); i++ {
			if c := b[i]; c == '"' || c == '\\' || c < ' ' || c >= 0x80 {
				return i
			}
		}
		return i
	}
	naiveQuote := func(b []byte, i int) int {
		if j := bytes.IndexAny(b[i:], `"\`); j >= 0 {
			return i + j
		}
		return len(b)
	}
	b := make([]byte, 19)
	for at := 0; at+1 < len(b); at++ {
		for c := range 256 {
			for d := range 256 {
				for k := range b {
					b[k] = 'a'
				}
				b[at], b[at+1] = byte(c), byte(d)
				for _, from := range []int{0, 1} {
					if got, want := plainASCII(b, from), naivePlain(b, from); got != want {
						t.Fatalf("plainASCII(%q, %d) = %d, want %d", b, from, got, want)
					}
					if got, want := quoteOrBackslash(b, from), naiveQuote(b, from); got != want {
						t.Fatalf("quoteOrBackslash(%q, %d) = %d, want %d", b, from, got, want)
					}
				}
			}
		}
	}
}
