package agentstream

import (
	"encoding/binary"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// msgReader cuts a stream's DATA payloads into gRPC messages (a 1-byte
// compressed flag, a 4-byte big-endian length, the message). A message
// inside one payload is handed over where it lies; one split across
// payloads is gathered in a buffer of its size, dropped once handed over,
// so an idle stream holds none.
type msgReader struct {
	max  int     // the largest message accepted
	hdr  [5]byte // the header being read
	nhdr int     // bytes of hdr read
	buf  []byte  // the message being gathered, or nil
	need int     // its size, once the header is whole
}

// feed reads p, calling deliver with every whole message (valid until
// deliver returns). An error of deliver ends feed; a compressed or
// oversized message is an error with its status.
func (m *msgReader) feed(p []byte, deliver func([]byte) error) error {
	for len(p) > 0 {
		if m.nhdr < len(m.hdr) {
			if m.nhdr == 0 && len(p) >= len(m.hdr) {
				// The common case: the header and maybe the message in p.
				copy(m.hdr[:], p)
				m.nhdr, p = len(m.hdr), p[len(m.hdr):]
			} else {
				n := copy(m.hdr[m.nhdr:], p)
				m.nhdr, p = m.nhdr+n, p[n:]
				if m.nhdr < len(m.hdr) {
					return nil
				}
			}
			if err := m.header(); err != nil {
				return err
			}
			if m.need <= len(p) {
				msg := p[:m.need]
				p = p[m.need:]
				m.nhdr = 0
				if err := deliver(msg); err != nil {
					return err
				}
				continue
			}
			m.buf = make([]byte, 0, m.need)
		}
		n := min(len(p), m.need-len(m.buf))
		m.buf, p = append(m.buf, p[:n]...), p[n:]
		if len(m.buf) == m.need {
			msg := m.buf
			m.buf, m.nhdr = nil, 0
			if err := deliver(msg); err != nil {
				return err
			}
		}
	}
	return nil
}

func (m *msgReader) header() error {
	if m.hdr[0] != 0 {
		return status.Error(codes.Unimplemented, "a compressed message, but no compression was negotiated")
	}
	size := binary.BigEndian.Uint32(m.hdr[1:])
	if uint64(size) > uint64(m.max) {
		return status.Errorf(codes.ResourceExhausted, "a message of %d bytes, more than the %d allowed", size, m.max)
	}
	m.need = int(size)
	return nil
}
