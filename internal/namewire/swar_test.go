package namewire

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// The word-at-a-time scan finds what a byte-by-byte scan finds, and
// exactZeros flags what it must, for every pair of byte values side by
// side at every offset of a word (a flag's borrow reaches the byte above
// it) and in the tail.
func TestWordScans(t *testing.T) {
	naivePlain := func(b []byte, i int) int {
		for ; i < len(b); i++ {
			if c := b[i]; c == '"' || c == '\\' || c < ' ' || c >= 0x80 {
				return i
			}
		}
		return i
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
				}
				if at < 8 {
					// exactZeros flags the zero bytes, every one
					// and no other.
					x, want := binary.LittleEndian.Uint64(b), uint64(0)
					for k := range 8 {
						if b[k] == 0 {
							want |= 0x80 << (8 * k)
						}
					}
					if got := exactZeros(x); got != want {
						t.Fatalf("exactZeros(%#x) = %#x, want %#x", x, got, want)
					}
				}
			}
		}
	}
}

// skipObject finds the end that a byte-by-byte walk of brackets and
// strings finds, on random text made of what it looks at.
func TestSkipObject(t *testing.T) {
	reference := func(b []byte) (int, bool) {
		depth := 0
		for i := 0; i < len(b); i++ {
			switch b[i] {
			case '"':
				for i++; i < len(b) && b[i] != '"'; i++ {
					if b[i] == '\\' {
						i++
					}
				}
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1, true
				}
			}
		}
		return len(b), false
	}
	r := rand.New(rand.NewPCG(1, 2))
	// Dense and sparse: words of every mix, words with none (some with
	// the letters a bracket can pass for in a word).
	alphabets := []string{`{}[]"\ a{"`, `{}[]"\aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaYy_"""`}
	for n := range 400_000 {
		alphabet := alphabets[n%2]
		b := make([]byte, 1+r.IntN(120))
		for i := range b {
			b[i] = alphabet[r.IntN(len(alphabet))]
		}
		b[0] = '{'
		s := &jscan{b: b}
		err := s.skipObject()
		end, ok := reference(b)
		if s.i != end || (err == nil) != ok {
			t.Fatalf("%q: skipObject ends at %d (error %v), want %d (%v)", b, s.i, err, end, ok)
		}
	}
}
