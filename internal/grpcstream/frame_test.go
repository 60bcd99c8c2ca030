package grpcstream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"
	"testing/iotest"
)

// frames returns the gRPC framing of msgs.
func frames(msgs ...[]byte) []byte {
	var b []byte
	for _, m := range msgs {
		b = appendFrame(b, m)
	}
	return b
}

// refFrames parses data the simple way, all in memory: the messages up to
// the first error, and that error's kind (nil when data ends between
// messages). A message cut short is the last one, with fewer bytes than
// its header says (short), as a streaming reader finds out only while
// reading it.
func refFrames(data []byte, max int) (out [][]byte, short bool, err error) {
	for len(data) > 0 {
		if len(data) < 5 {
			return out, false, errTruncated
		}
		switch data[0] {
		case 0:
		case 1:
			return out, false, errCompressed
		default:
			return out, false, errBadFrame
		}
		n := int64(binary.BigEndian.Uint32(data[1:5]))
		if n > int64(max) {
			return out, false, &sizeError{size: n}
		}
		if int64(len(data)-5) < n {
			return append(out, data[5:]), true, errTruncated
		}
		out = append(out, data[5:5+n])
		data = data[5+n:]
	}
	return out, false, nil
}

// FuzzFrameReader checks the streaming framer against refFrames: the same
// messages, byte for byte, whether the caller reads a message whole, in
// part (the rest skipped by next) or not at all, through a reader that
// returns a byte at a time or half of what was asked; and the same error.
func FuzzFrameReader(f *testing.F) {
	f.Add(frames([]byte("hello"), []byte{}, []byte("world")), 100, byte(0)) // three messages, one empty
	f.Add(frames(bytes.Repeat([]byte{7}, 300)), 299, byte(1))               // one byte over the limit
	f.Add(frames(bytes.Repeat([]byte{7}, 300)), 300, byte(2))               // exactly the limit, read in part
	f.Add(frames([]byte("cut here"))[:9], 100, byte(0))                     // truncated inside a message
	f.Add(frames([]byte("abc"))[:3], 100, byte(0))                          // truncated inside a header
	f.Add(append(frames([]byte("a")), 1, 0, 0, 0, 1, 'z'), 100, byte(0))    // a compressed message after a plain one
	f.Add([]byte{2, 0, 0, 0, 0}, 100, byte(0))                              // unknown flags
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff}, 1<<20, byte(0))                // a 4 GiB length
	f.Add([]byte{}, 0, byte(0))                                             // no message at all
	f.Add(frames([]byte("x"), []byte("yz"), []byte("")), 2, byte(3))        // skipped unread
	f.Fuzz(func(t *testing.T, data []byte, max int, mode byte) {
		if max < 0 || max > 1<<20 {
			return
		}
		want, short, wantErr := refFrames(data, max)
		var src io.Reader = bytes.NewReader(data)
		if mode&1 != 0 {
			src = iotest.OneByteReader(src)
		} else {
			src = iotest.HalfReader(src)
		}
		fr := &frameReader{r: src, max: max}
		for i := 0; ; i++ {
			size, err := fr.next()
			if err != nil {
				if i != len(want) && !(short && i == len(want)-1) {
					t.Fatalf("error %v after %d messages, want %d", err, i, len(want))
				}
				switch {
				case wantErr == nil:
					if err != io.EOF {
						t.Fatalf("error %v at the end, want io.EOF", err)
					}
				case errors.As(wantErr, new(*sizeError)):
					if !errors.As(err, new(*sizeError)) {
						t.Fatalf("error %v, want a size error", err)
					}
				case !errors.Is(err, wantErr):
					t.Fatalf("error %v, want %v", err, wantErr)
				}
				return
			}
			if i >= len(want) {
				t.Fatalf("message %d of size %d, want only %d messages", i, size, len(want))
			}
			last := short && i == len(want)-1
			if size != len(want[i]) && !(last && size > len(want[i])) {
				t.Fatalf("message %d: size %d, want %d", i, size, len(want[i]))
			}
			// mode's bits 1-2: read whole, half, or none of the odd messages.
			read := size
			if i%2 == 1 {
				switch mode >> 1 & 3 {
				case 1:
					read = size / 2
				case 2:
					read = 0
				}
			}
			got := make([]byte, read)
			if _, err := io.ReadFull(fr, got); last && read > len(want[i]) {
				if !errors.Is(err, errTruncated) {
					t.Fatalf("message %d, cut short: read %v, want %v", i, err, errTruncated)
				}
				return
			} else if err != nil {
				t.Fatalf("message %d: read %d bytes: %v", i, read, err)
			}
			if !bytes.Equal(got, want[i][:read]) { // a short message's first bytes too
				t.Fatalf("message %d differs", i)
			}
			if read == size {
				if n, err := fr.Read(make([]byte, 1)); n != 0 || err != io.EOF {
					t.Fatalf("message %d: read past its end: %d, %v", i, n, err)
				}
			}
		}
	})
}

func TestDecodeMessage(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{in: "plain text", want: "plain text"},
		{in: "100%25 sure", want: "100% sure"},
		{in: "caf%C3%A9%0Aline", want: "café\nline"},
		{in: "lone % sign", want: "lone % sign"},
		{in: "bad %zz hex", want: "bad %zz hex"},
		{in: "cut %4", want: "cut %4"},
		{in: "end %", want: "end %"},
		{in: "%41%42", want: "AB"},
		{in: "%+1", want: "%+1"},
	} {
		if got := decodeMessage(tc.in); got != tc.want {
			t.Errorf("decodeMessage(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCodeString(t *testing.T) {
	for c, want := range map[Code]string{OK: "OK", FailedPrecondition: "FailedPrecondition", Unauthenticated: "Unauthenticated", 17: "Code(17)"} {
		if got := c.String(); got != want {
			t.Errorf("Code(%d) = %q, want %q", c, got, want)
		}
	}
}
