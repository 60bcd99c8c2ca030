package namewire

import (
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
)

// A full table arrives names first and zones last (the control plane's
// order, and proto's field order). Built from the file as it came, a start
// walked it twice: once for the zones (the builder needs them before the
// first name) and to count the names (to size the table's index and pace
// the collector), once to build; and once more before both for the
// settings. Copying the table to the state dir already passes every byte,
// so the copy notes the table's shape on the way, and the version hands
// its zones first and its count to the build: one walk.

// Shape is what a copy of a NameTable off the stream learned of it.
type Shape struct {
	Names    int      // entries of its table
	Zones    []string // its authoritative zones, in order
	settings []byte   // the settings fields, as a NameTable of them alone
	// bad says why the table is not well formed, or is nil: such a
	// table is refused as it is received, with the reason.
	bad error
}

// TableSettings returns the settings of the table, or why the table is
// not well formed.
func (s *Shape) TableSettings() (*AgentSettings, error) {
	if s.bad != nil {
		return nil, s.bad
	}
	return TableSettings(s.settings)
}

// copyTable copies the next n bytes, a NameTable, to w field by field and
// returns its shape. A table that is not well formed is copied as it is,
// and its shape says why (bad): only a failure to read or write is an
// error.
func (p *pbReader) copyTable(w io.Writer, n uint64) (*Shape, error) {
	if p.left >= 0 && n > uint64(p.left) {
		return nil, errTruncated
	}
	t := &pbReader{r: p.r, left: int64(n)}
	defer func() { p.left = max(p.left-int64(n)+t.left, -1) }()
	s := new(Shape)
	for t.left > 0 {
		size, num, typ, err := t.peekField()
		if err != nil {
			s = &Shape{bad: fmt.Errorf("name table, %d bytes from its end: %w", t.left, err)}
			break
		}
		switch {
		case typ != protowire.BytesType || num > fieldNameTableSettings:
		case num == fieldNameTableTable:
			s.Names++
		default: // a zone or settings: kept, and copied from there
			b, err := t.take(uint64(size))
			if err != nil {
				return nil, err
			}
			_, _, m := protowire.ConsumeTag(b)
			v, _ := protowire.ConsumeBytes(b[m:])
			if num == fieldNameTableZones {
				s.Zones = append(s.Zones, string(v))
			} else {
				s.settings = append(s.settings, b...)
			}
			if _, err := w.Write(b); err != nil {
				return nil, err
			}
			continue
		}
		if err := t.copyField(w, size); err != nil {
			return nil, err
		}
	}
	if t.left > 0 {
		if err := t.copyN(w, uint64(t.left)); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// peekField returns the size of the next field (tag, length and value)
// and its number and type, reading nothing; it fails when the bytes are
// not a field of a wire type a NameTable may hold, or run past the
// message.
func (p *pbReader) peekField() (size int, num protowire.Number, typ protowire.Type, err error) {
	// A tag (field numbers fit 5 bytes) and a length or a varint (10).
	head, _ := p.r.Peek(int(min(p.left, 15)))
	num, typ, m := protowire.ConsumeTag(head)
	if m < 0 {
		return 0, 0, 0, fmt.Errorf("field tag: %w", protowire.ParseError(m))
	}
	if num > protowire.MaxValidNumber {
		return 0, 0, 0, fmt.Errorf("field number %d out of range", num)
	}
	var v int
	switch typ {
	case protowire.VarintType:
		_, v = protowire.ConsumeVarint(head[m:])
	case protowire.Fixed32Type:
		v = 4
	case protowire.Fixed64Type:
		v = 8
	case protowire.BytesType:
		l, k := protowire.ConsumeVarint(head[m:])
		if k < 0 || l > uint64(p.left) {
			return 0, 0, 0, fmt.Errorf("field %d: %w", num, errTruncated)
		}
		v = k + int(l)
	default:
		return 0, 0, 0, fmt.Errorf("field %d: unsupported wire type %d", num, typ)
	}
	if v < 0 || int64(m+v) > p.left {
		return 0, 0, 0, fmt.Errorf("field %d: %w", num, errTruncated)
	}
	return m + v, num, typ, nil
}

// copyField copies the next size bytes to w, from the reader's buffer when
// they fit (an entry: no copy loop per name).
func (p *pbReader) copyField(w io.Writer, size int) error {
	if size > p.r.Size() {
		return p.copyN(w, uint64(size))
	}
	b, err := p.r.Peek(size)
	if err != nil {
		return errTruncated // peekField saw the field fit the message
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	return p.discard(uint64(size))
}
