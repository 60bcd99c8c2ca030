package dnstap

import (
	"bytes"
	"testing"
)

// FuzzReadControl: a collector's control frame, whatever its bytes,
// yields a type and content types or an error, never a panic or a read
// past what it declared; a frame appendControl wrote reads back.
func FuzzReadControl(f *testing.F) {
	f.Add(appendControl(nil, controlAccept, ContentType))                              // the ACCEPT a collector sends
	f.Add(appendControl(nil, controlFinish))                                           // FINISH, no fields
	f.Add(appendControl(nil, controlAccept, "a", ContentType))                         // two content types
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 12, 0, 0, 0, 1, 0, 0, 0, 1, 255, 255, 255, 255}) // a field longer than the frame
	f.Add([]byte{0, 0, 0, 5, 1, 2, 3, 4, 5})                                           // a data frame where a control frame belongs
	f.Fuzz(func(t *testing.T, b []byte) {
		typ, cts, err := readControl(bytes.NewReader(b))
		if err != nil {
			return
		}
		again, _, err := readControl(bytes.NewReader(appendControl(nil, typ, cts...)))
		if err != nil || again != typ {
			t.Fatalf("control type %d with %q does not read back: %d, %v", typ, cts, again, err)
		}
	})
}
