package upstream

import (
	"github.com/miekg/dns"
)

// maxQuestion is the longest question section: a 255-byte name, type, class.
const maxQuestion = 255 + 4

// lowerQuestion checks that qwire is one question section (uncompressed
// labels, root label, type, class and nothing else) and writes it into key
// with ASCII letters lowercased. It returns the name's wire length. It
// allocates nothing, so the cache-hit path can build its key on the stack.
func lowerQuestion(key *[maxQuestion]byte, qwire []byte) (nameLen int, err error) {
	// One pass: walk the labels and copy them lowered (the hit path's
	// second largest cost after hashing when it was two passes).
	i := 0
	for {
		if i >= len(qwire) {
			return 0, ErrBadQuestion
		}
		l := int(qwire[i])
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
		if end > 254 || end >= len(qwire) { // the name, with its root byte, fits in 255
			return 0, ErrBadQuestion
		}
		for j := i + 1; j < end; j++ {
			b := qwire[j]
			if 'A' <= b && b <= 'Z' {
				b += 'a' - 'A'
			}
			key[j] = b
		}
		i = end
	}
	if len(qwire) != i+4 {
		return 0, ErrBadQuestion
	}
	copy(key[i:], qwire[i:])
	return i, nil
}

// questionWire packs q into the question-section form AppendReply takes.
func questionWire(q dns.Question) ([]byte, error) {
	buf := make([]byte, maxQuestion)
	n, err := dns.PackDomainName(dns.Fqdn(q.Name), buf, 0, nil, false)
	if err != nil {
		return nil, err
	}
	buf = append(buf[:n], byte(q.Qtype>>8), byte(q.Qtype), byte(q.Qclass>>8), byte(q.Qclass))
	return buf, nil
}

// equalFoldWire compares a name in wire form with a lowercased one. Length
// bytes never fall in 'A'..'Z', so a byte-wise fold is exact.
func equalFoldWire(got, lower []byte) bool {
	if len(got) != len(lower) {
		return false
	}
	for i, b := range got {
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if b != lower[i] {
			return false
		}
	}
	return true
}
