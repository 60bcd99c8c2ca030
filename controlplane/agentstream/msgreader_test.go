package agentstream

import (
	"bytes"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzMsgReader: however the bytes are cut into DATA payloads, the
// messages handed over are the same as from one payload, and a bad
// header is an error whichever the cut.
func FuzzMsgReader(f *testing.F) {
	f.Add([]byte("\x00\x00\x00\x00\x02hi\x00\x00\x00\x00\x00"), uint8(1))              // two messages, one empty
	f.Add([]byte("\x00\x00\x00\x00\x05hello"), uint8(3))                               // split inside the header
	f.Add([]byte("\x01\x00\x00\x00\x01x"), uint8(2))                                   // compressed: refused
	f.Add([]byte("\x00\x00\x00\x01\x00"), uint8(4))                                    // above the bound
	f.Add([]byte("\x00\x00\x00\x00\x03abc\x00\x00\x00\x00\x04abcd\x00\x00"), uint8(5)) // a header cut at the end
	f.Fuzz(func(t *testing.T, data []byte, cut uint8) {
		whole, werr := readAll(data, len(data)+1)
		pieces, perr := readAll(data, int(cut)%8+1)
		if (werr == nil) != (perr == nil) {
			t.Fatalf("one payload: %v; cut every %d bytes: %v", werr, int(cut)%8+1, perr)
		}
		if werr != nil {
			return
		}
		if diff := cmp.Diff(whole, pieces); diff != "" {
			t.Fatalf("messages (-one payload +cut):\n%s", diff)
		}
	})
}

// readAll feeds data in payloads of n bytes and returns the messages.
func readAll(data []byte, n int) ([][]byte, error) {
	m := msgReader{max: 64}
	var got [][]byte
	deliver := func(b []byte) error { got = append(got, bytes.Clone(b)); return nil }
	for len(data) > 0 {
		k := min(n, len(data))
		if err := m.feed(data[:k], deliver); err != nil {
			return got, err
		}
		data = data[k:]
	}
	return got, nil
}

func TestMsgReaderHoldsNothingWhenIdle(t *testing.T) {
	m := msgReader{max: 1 << 10}
	msg := append([]byte{0, 0, 0, 0, 100}, make([]byte, 100)...)
	n := 0
	for _, p := range [][]byte{msg[:3], msg[3:50], msg[50:]} {
		if err := m.feed(p, func([]byte) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if n != 1 || m.buf != nil {
		t.Fatalf("%d messages, buffer %d bytes kept; want 1 and none", n, cap(m.buf))
	}
}
