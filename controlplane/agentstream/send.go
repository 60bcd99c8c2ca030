package agentstream

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"sync"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/status"
)

// respHeaders is the header block of every response, encoded once: no
// dynamic table, so it holds on any connection.
var respHeaders = encodeFields([]hpack.HeaderField{
	{Name: ":status", Value: "200"}, {Name: "content-type", Value: "application/grpc"},
})

// encodeFields encodes fields without the dynamic table (a size update to
// zero first), so the block means the same on every connection.
func encodeFields(fields []hpack.HeaderField) []byte {
	var b bytes.Buffer
	e := hpack.NewEncoder(&b)
	e.SetMaxDynamicTableSizeLimit(0)
	for _, f := range fields {
		_ = e.WriteField(f)
	}
	return b.Bytes()
}

// trailers is the header block that carries s, with the response's
// headers when it is trailers-only.
func trailers(only bool, s *status.Status) []byte {
	fields := make([]hpack.HeaderField, 0, 4)
	if only {
		fields = append(fields, hpack.HeaderField{Name: ":status", Value: "200"},
			hpack.HeaderField{Name: "content-type", Value: "application/grpc"})
	}
	fields = append(fields, hpack.HeaderField{Name: "grpc-status", Value: strconv.Itoa(int(s.Code()))})
	if m := s.Message(); m != "" {
		fields = append(fields, hpack.HeaderField{Name: "grpc-message", Value: percentEncode(m)})
	}
	return encodeFields(fields)
}

// percentEncode encodes grpc-message: bytes outside printable ASCII, and
// '%', as %XX.
func percentEncode(s string) string {
	const hex = "0123456789ABCDEF"
	var b []byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c <= 0x7e && c != '%' {
			if b != nil {
				b = append(b, c)
			}
			continue
		}
		if b == nil {
			b = append(make([]byte, 0, len(s)+8), s[:i]...)
		}
		b = append(b, '%', hex[c>>4], hex[c&15])
	}
	if b == nil {
		return s
	}
	return string(b)
}

const (
	// flushAt is how much a send frames before it writes.
	flushAt = 32 << 10
	// maxBlocked bounds the bytes waiting for a stream's window.
	maxBlocked = 16 << 20
)

var writeBufs = sync.Pool{New: func() any { b := make([]byte, 0, flushAt+16384+9); return &b }}

// Send sends one message made of parts, in order, as DATA frames written
// by the caller; it never waits for the peer (bytes beyond its flow
// control window wait in the stream, those the socket does not take in
// the connection). It fails once the stream or the connection ended.
func (st *Stream) Send(parts [][]byte) error {
	size := 0
	for _, p := range parts {
		size += len(p)
	}
	var pre [5]byte
	binary.BigEndian.PutUint32(pre[1:], uint32(size))
	c := st.c
	c.wmu.Lock()
	defer c.wmu.Unlock()
	switch {
	case c.closed:
		return c.closeErr
	case st.ended:
		return errStreamEnded
	}
	if !st.headersSent {
		st.headersSent = true
		err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: respHeaders, EndHeaders: true})
		if err != nil {
			return err
		}
	}
	c.sentData.Store(true)
	w := dataWriter{c: c, st: st, buf: writeBufs.Get().(*[]byte)}
	defer w.free()
	// Behind bytes that wait for the window, nothing may pass.
	stalled := len(st.blocked) > 0
	for i := -1; i < len(parts); i++ {
		p := pre[:]
		if i >= 0 {
			p = parts[i]
		}
		if !stalled {
			p = w.add(p)
			stalled = len(p) > 0
		}
		if stalled {
			if len(st.blocked)+len(p) > maxBlocked {
				w.err = errTooSlow
				break
			}
			st.blocked = append(st.blocked, p...)
		}
	}
	return w.flush()
}

// drainLocked sends what waits for the stream's window, as far as the
// windows allow.
func (c *conn) drainLocked(st *Stream) {
	if len(st.blocked) == 0 || st.ended || c.closed {
		return
	}
	w := dataWriter{c: c, st: st, buf: writeBufs.Get().(*[]byte)}
	defer w.free()
	// What the windows do not take stays where it is: no copy of the
	// rest for every window update.
	st.blocked = w.add(st.blocked)
	if len(st.blocked) == 0 {
		st.blocked = nil
	}
	if err := w.flush(); err != nil {
		c.closed, c.closeErr = true, err
		c.nb.Close()
	}
}

// dataWriter frames a stream's bytes into DATA frames within the windows.
type dataWriter struct {
	c    *conn
	st   *Stream
	buf  *[]byte
	hdr  int  // where the open frame's header is, when open
	open bool // a frame is open
	err  error
}

// add frames b as far as the windows allow and returns the rest.
func (w *dataWriter) add(b []byte) []byte {
	c, st := w.c, w.st
	for len(b) > 0 && w.err == nil {
		room := min(c.connWindow, st.window)
		if w.open {
			room = min(room, int64(c.maxFrame-(len(*w.buf)-w.hdr-9)))
		} else {
			room = min(room, int64(c.maxFrame))
		}
		if room <= 0 {
			if !w.open {
				return b
			}
			w.close()
			continue
		}
		if !w.open {
			w.hdr = len(*w.buf)
			*w.buf = append(*w.buf, make([]byte, 9)...)
			w.open = true
		}
		n := min(int64(len(b)), room)
		*w.buf = append(*w.buf, b[:n]...)
		c.connWindow -= n
		st.window -= n
		b = b[n:]
		if len(*w.buf) >= flushAt {
			w.close()
			w.write()
		}
	}
	return b
}

// close fills the open frame's header.
func (w *dataWriter) close() {
	if !w.open {
		return
	}
	w.open = false
	h := (*w.buf)[w.hdr : w.hdr+9]
	n := len(*w.buf) - w.hdr - 9
	h[0], h[1], h[2] = byte(n>>16), byte(n>>8), byte(n)
	h[3], h[4] = byte(http2.FrameData), 0
	binary.BigEndian.PutUint32(h[5:], w.st.id)
}

func (w *dataWriter) write() {
	if w.err == nil && len(*w.buf) > 0 {
		_, w.err = w.c.rw.Write(*w.buf)
	}
	*w.buf = (*w.buf)[:0]
}

func (w *dataWriter) flush() error {
	w.close()
	w.write()
	return w.err
}

func (w *dataWriter) free() {
	if cap(*w.buf) <= flushAt+16384+9 {
		*w.buf = (*w.buf)[:0]
		writeBufs.Put(w.buf)
	}
}
