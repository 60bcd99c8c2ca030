package grpcstream

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// frameReader reads gRPC length-prefixed messages off a byte stream (the
// response body): next reads a message's 5-byte header, then Read reads
// the message's bytes and returns io.EOF at its end. Nothing is buffered:
// the caller's reads go straight to r.
type frameReader struct {
	r    io.Reader
	max  int   // the largest message accepted
	left int64 // bytes of the current message not read yet
	hdr  [5]byte
}

var (
	// errTruncated: the stream ended inside a header or a message.
	errTruncated = errors.New("stream ended inside a message")
	// errCompressed: a message with the compressed flag, which this
	// client never negotiates (it sends no grpc-accept-encoding).
	errCompressed = errors.New("received a compressed message, but no compression was negotiated")
)

// next skips what is left of the current message and reads the next
// message's header, returning its size. It returns io.EOF when the
// stream ends between messages, errTruncated inside one, a *sizeError for
// a message above max, and errCompressed or a flag error for a message
// that is not plain.
func (f *frameReader) next() (int, error) {
	if f.left > 0 {
		n, err := io.CopyN(io.Discard, f.r, f.left)
		f.left -= n
		if err != nil {
			return 0, truncated(err)
		}
	}
	// Not io.ReadFull: it reports a short read as io.ErrUnexpectedEOF,
	// which is also what net/http's HTTP/2 body returns when the
	// connection is lost, and the two must not be confused.
	for n := 0; n < len(f.hdr); {
		m, err := f.r.Read(f.hdr[n:])
		n += m
		switch {
		case err == nil:
		case errors.Is(err, io.EOF) && n == 0:
			return 0, io.EOF
		case errors.Is(err, io.EOF) && n == len(f.hdr):
			// A whole header: its message's end, or the stream's, comes
			// with the next read.
		case errors.Is(err, io.EOF):
			return 0, errTruncated
		default:
			return 0, err
		}
	}
	switch f.hdr[0] {
	case 0:
	case 1:
		return 0, errCompressed
	default:
		return 0, fmt.Errorf("%w: message flags %#x", errBadFrame, f.hdr[0])
	}
	size := int64(binary.BigEndian.Uint32(f.hdr[1:]))
	if size > int64(f.max) {
		return 0, &sizeError{size: size, max: int64(f.max)}
	}
	f.left = size
	return int(size), nil
}

// errBadFrame: a header whose flags byte is neither 0 nor 1 (the
// stream is not gRPC framing, or lost its place in it).
var errBadFrame = errors.New("bad gRPC frame")

// Read reads the current message's bytes; io.EOF at its end.
func (f *frameReader) Read(p []byte) (int, error) {
	if f.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > f.left {
		p = p[:f.left]
	}
	n, err := f.r.Read(p)
	f.left -= int64(n)
	if err != nil {
		if errors.Is(err, io.EOF) && f.left == 0 {
			return n, nil // the message is whole; the next call says EOF
		}
		return n, truncated(err)
	}
	return n, nil
}

// truncated turns the end of the stream (io.EOF) inside a frame into
// errTruncated; other errors pass, io.ErrUnexpectedEOF among them: that
// is net/http's HTTP/2 body on a lost connection.
func truncated(err error) error {
	if errors.Is(err, io.EOF) {
		return errTruncated
	}
	return err
}
