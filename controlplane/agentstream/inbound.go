package agentstream

import (
	"bufio"
	"errors"
	"io"
	"sync"

	"golang.org/x/net/http2"
)

// readBufSize is the read buffer a reader takes from a pool while it
// reads: agents send small messages (ACKs of ~100 bytes). A connection
// holds none while idle; a frame longer than it gets a buffer of its own
// while it is read.
const readBufSize = 4 << 10

var readBufs = sync.Pool{New: func() any { b := make([]byte, readBufSize); return &b }}

const (
	frameHeaderLen = 9
	// maxReadFrame is the SETTINGS_MAX_FRAME_SIZE the server keeps
	// (HTTP/2's default): the framer refuses a longer frame by its header.
	maxReadFrame = 16384
	// maxHeaderChain bounds a header block spread over HEADERS and
	// CONTINUATION frames, gathered before the framer reads it.
	maxHeaderChain = 64 << 10
)

var errHeaderChain = errors.New("agentstream: a header block longer than 64 KiB")

// inbound is what a connection read and the framer has not: the bytes of
// frames not yet whole. Its buffer comes from readBufs and goes back once
// every byte was read.
type inbound struct {
	br   *bufio.Reader // while routing, the framer reads through it
	buf  *[]byte       // or nil
	own  bool          // buf is the connection's own, not the pool's
	r, w int           // the unread bytes are (*buf)[r:w]
}

// Read is the framer's: it gives only bytes read before (a frame is read
// once it is whole, see frameNeed), or reads through br while routing.
func (in *inbound) Read(p []byte) (int, error) {
	if in.br != nil {
		return in.br.Read(p)
	}
	if in.r == in.w {
		return 0, io.ErrUnexpectedEOF
	}
	n := copy(p, (*in.buf)[in.r:in.w])
	in.r += n
	return n, nil
}

func (in *inbound) unread() []byte {
	if in.buf == nil {
		return nil
	}
	return (*in.buf)[in.r:in.w]
}

// space returns room after the unread bytes, at least enough for need
// unread bytes in all: the pool's buffer, or one of need bytes.
func (in *inbound) space(need int) []byte {
	if in.buf == nil {
		in.buf, in.own = readBufs.Get().(*[]byte), false
	}
	if in.r > 0 {
		in.w = copy(*in.buf, (*in.buf)[in.r:in.w])
		in.r = 0
	}
	if need > len(*in.buf) {
		b := make([]byte, need)
		copy(b, (*in.buf)[:in.w])
		in.putBack()
		in.buf, in.own = &b, true
	}
	return (*in.buf)[in.w:]
}

// release gives the buffer back once every byte in it was read.
func (in *inbound) release() {
	if in.buf != nil && in.r == in.w {
		in.putBack()
		in.buf, in.r, in.w = nil, 0, 0
	}
}

func (in *inbound) putBack() {
	if !in.own {
		readBufs.Put(in.buf)
	}
}

// endRouting moves what the router's buffered reader holds beyond the
// first request's headers into in, and reads from in from now on.
func (in *inbound) endRouting() {
	br := in.br
	in.br = nil
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		in.w += copy(in.space(n), b)
	}
}

// frameNeed is how many bytes, from b's start, the framer's next read
// takes: the next frame, or a HEADERS frame and its CONTINUATIONs up to
// END_HEADERS (the framer reads them at once). More than len(b): read
// more first. A frame longer than maxReadFrame needs only its header,
// the framer refuses it.
func frameNeed(b []byte) (int, error) {
	off := 0
	for {
		if len(b)-off < frameHeaderLen {
			return off + frameHeaderLen, nil
		}
		h := b[off:]
		n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		typ, flags := http2.FrameType(h[3]), http2.Flags(h[4])
		if n > maxReadFrame {
			return off + frameHeaderLen, nil
		}
		end := off + frameHeaderLen + n
		switch {
		case end > maxHeaderChain:
			return 0, errHeaderChain
		case len(b) < end:
			return end, nil
		case off == 0 && typ != http2.FrameHeaders,
			off > 0 && typ != http2.FrameContinuation, // the framer refuses it
			flags.Has(http2.FlagHeadersEndHeaders):
			return end, nil
		}
		off = end
	}
}
