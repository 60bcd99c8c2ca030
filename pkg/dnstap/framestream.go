package dnstap

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
)

// Frame Streams (the framing of dnstap, farsightsec/fstrm's PROTOCOL
// document): a data frame is a big-endian uint32 length and the payload; a
// control frame is an escape (a zero length), its own length, a control
// type and fields, each a type, a length and the bytes. On a socket the
// writer and the reader shake hands: READY (the content types offered),
// ACCEPT (those taken), START; at the end STOP and FINISH.

// ContentType is the Frame Streams content type of dnstap.
const ContentType = "protobuf:dnstap.Dnstap"

// Control frame types and the one field type.
const (
	controlAccept    = 0x01
	controlStart     = 0x02
	controlStop      = 0x03
	controlReady     = 0x04
	controlFinish    = 0x05
	fieldContentType = 0x01
	// maxControlFrame bounds a control frame read (fstrm's own limit).
	maxControlFrame = 512
)

var (
	errBadControl  = errors.New("malformed control frame")
	errNotAccepted = errors.New("collector does not accept content type " + ContentType)
)

// appendControl appends a control frame of type typ with one content type
// field per entry of contentTypes.
func appendControl(b []byte, typ uint32, contentTypes ...string) []byte {
	n := 4
	for _, ct := range contentTypes {
		n += 8 + len(ct)
	}
	b = binary.BigEndian.AppendUint32(b, 0) // escape
	b = binary.BigEndian.AppendUint32(b, uint32(n))
	b = binary.BigEndian.AppendUint32(b, typ)
	for _, ct := range contentTypes {
		b = binary.BigEndian.AppendUint32(b, fieldContentType)
		b = binary.BigEndian.AppendUint32(b, uint32(len(ct)))
		b = append(b, ct...)
	}
	return b
}

// readControl reads one control frame and returns its type and content
// types; anything else (a data frame, a frame over maxControlFrame, a
// field running past the end) is errBadControl.
func readControl(r io.Reader) (typ uint32, contentTypes []string, err error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[4:])
	if binary.BigEndian.Uint32(hdr[:4]) != 0 || n < 4 || n > maxControlFrame {
		return 0, nil, errBadControl
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(r, buf); err != nil {
		return 0, nil, err
	}
	typ, buf = binary.BigEndian.Uint32(buf), buf[4:]
	for len(buf) > 0 {
		if len(buf) < 8 {
			return 0, nil, errBadControl
		}
		ft, fl := binary.BigEndian.Uint32(buf), binary.BigEndian.Uint32(buf[4:])
		buf = buf[8:]
		if uint64(fl) > uint64(len(buf)) {
			return 0, nil, errBadControl
		}
		if ft == fieldContentType {
			contentTypes = append(contentTypes, string(buf[:fl]))
		}
		buf = buf[fl:]
	}
	return typ, contentTypes, nil
}

// handshake runs the writer's side of the bidirectional handshake on rw:
// READY, the collector's ACCEPT naming ContentType, START.
func handshake(rw io.ReadWriter) error {
	if _, err := rw.Write(appendControl(nil, controlReady, ContentType)); err != nil {
		return fmt.Errorf("write READY: %w", err)
	}
	typ, cts, err := readControl(rw)
	if err != nil {
		return fmt.Errorf("read ACCEPT: %w", err)
	}
	if typ != controlAccept {
		return fmt.Errorf("read ACCEPT: got control type %d: %w", typ, errBadControl)
	}
	if !slices.Contains(cts, ContentType) {
		return errNotAccepted
	}
	if _, err := rw.Write(appendControl(nil, controlStart, ContentType)); err != nil {
		return fmt.Errorf("write START: %w", err)
	}
	return nil
}
