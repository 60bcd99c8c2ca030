package namewire

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"google.golang.org/protobuf/encoding/protowire"
)

// FileTable is the raw walk of the table inside a file holding a
// StreamNameTableResponse (the agent's state file), read in one streaming
// pass per walk through a small buffer: a 100,000-name table is never in
// memory whole, neither while it is built nor while it is the base of
// deltas.
func FileTable(path string) RawTable {
	return func(name func(host, info []byte) error, zone func(string) error) error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		t, err := (&pbReader{r: bufio.NewReaderSize(f, 32<<10), left: -1}).seekTable()
		if err != nil {
			return err
		}
		return t.eachName(name, zone)
	}
}

// maxFileSettings bounds the settings FileSettings reads: a policy of
// thousands of rules is far below it; anything larger is a damaged file.
const maxFileSettings = 16 << 20

// FileSettings reads the settings of the table inside a file holding a
// StreamNameTableResponse (the agent's state file), strictly (see
// AgentSettings), as a restore of the file finds them (FileVersion, then
// Shape.TableSettings): nil when the table has none, ErrNoTable when the
// file holds no table, an error when the table is not well formed. It
// reads the file once through a 4 KB buffer and keeps the settings only:
// the names are skipped where they lie, never decoded nor held, so the
// settings of a 100,000-name table cost a process (the supervisor's safe
// mode) a few kilobytes besides the settings themselves.
func FileSettings(path string) (*AgentSettings, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	t, err := (&pbReader{r: bufio.NewReaderSize(f, 4<<10), left: -1}).seekTable()
	if err != nil {
		return nil, err
	}
	settings, err := t.settingsFields()
	if err != nil {
		return nil, fmt.Errorf("name table, %d bytes from its end: %w", t.left, err)
	}
	return TableSettings(settings)
}

// seekTable reads the fields of a StreamNameTableResponse up to its full
// table and returns a reader of that table's fields.
func (p *pbReader) seekTable() (*pbReader, error) {
	_, n, err := p.nextBytes(func(num protowire.Number) bool { return num == FieldResponseFull })
	if errors.Is(err, io.EOF) {
		return nil, ErrNoTable
	}
	if err != nil {
		return nil, err
	}
	if n > math.MaxInt64 {
		// No file holds it; as an int64 it would read as "to the end of
		// the file".
		return nil, errTruncated
	}
	// A repeated table would be merged by proto; the agent never writes
	// one twice, so the first is the table.
	return &pbReader{r: p.r, left: int64(n)}, nil
}

// nextBytes skips fields up to the next length-delimited one that want
// keeps and returns its number and length; io.EOF at the end.
func (p *pbReader) nextBytes(want func(protowire.Number) bool) (protowire.Number, uint64, error) {
	for {
		num, typ, err := p.tag()
		if err != nil {
			return 0, 0, err
		}
		if typ != protowire.BytesType || !want(num) {
			if err := p.skip(typ); err != nil {
				return 0, 0, err
			}
			continue
		}
		n, err := p.varint()
		return num, n, err
	}
}

// settingsFields reads a NameTable to its end, checking each field as
// copyTable does, and returns its settings fields (tags and lengths
// included): a NameTable of them alone, for TableSettings.
func (p *pbReader) settingsFields() ([]byte, error) {
	var b []byte
	for p.left > 0 {
		size, num, typ, err := p.peekField()
		if err != nil {
			return nil, err
		}
		if num != fieldNameTableSettings || typ != protowire.BytesType {
			if err := p.discard(uint64(size)); err != nil {
				return nil, err
			}
			continue
		}
		if len(b)+size > maxFileSettings {
			return nil, fmt.Errorf("settings of more than %d bytes", maxFileSettings)
		}
		v, err := p.take(uint64(size))
		if err != nil {
			return nil, err
		}
		if b == nil {
			b = v // one field, the common case: not copied again
		} else {
			b = append(b, v...)
		}
	}
	return b, nil
}

// FileVersion reads the version of the StreamNameTableResponse in the
// file at path and the shape of its table (as its copy off the stream
// notes it), checking that it holds a table, without reading the table
// into memory.
func FileVersion(path string) (string, *Shape, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	r := &pbReader{r: bufio.NewReaderSize(f, 32<<10), left: -1}
	var version string
	var shape *Shape
	found := false
	for {
		num, typ, err := r.tag()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", nil, err
		}
		switch {
		case typ != protowire.BytesType:
			err = r.skip(typ)
		case num == FieldResponseVersion:
			var b []byte
			b, err = r.bytes()
			version = string(b)
		case num == FieldResponseFull && !found:
			// A repeated table would be merged by proto;
			// the agent never writes one twice, so the first is the table.
			var n uint64
			if n, err = r.varint(); err == nil {
				shape, err = r.copyTable(io.Discard, n)
			}
			found = true
		default:
			err = r.skip(typ)
		}
		if err != nil {
			return "", nil, err
		}
	}
	if !found {
		return "", nil, ErrNoTable
	}
	return version, shape, nil
}

// pbReader reads protobuf wire format from a stream. left is how many
// bytes the message still holds, or -1 for "up to EOF".
type pbReader struct {
	r    *bufio.Reader
	left int64
	buf  []byte // reused by bytes
}

var errTruncated = errors.New("truncated")

// tag reads a field's tag; io.EOF at the end of the message.
func (p *pbReader) tag() (protowire.Number, protowire.Type, error) {
	if p.left == 0 {
		return 0, 0, io.EOF
	}
	if p.left < 0 {
		if _, err := p.r.Peek(1); err != nil {
			return 0, 0, err // io.EOF between fields is the end
		}
	}
	v, err := p.varint()
	if err != nil {
		return 0, 0, err
	}
	num, typ := protowire.DecodeTag(v)
	if num < protowire.MinValidNumber || num > protowire.MaxValidNumber {
		return 0, 0, fmt.Errorf("bad field number %d", num)
	}
	return num, typ, nil
}

func (p *pbReader) byte() (byte, error) {
	if p.left == 0 {
		return 0, errTruncated
	}
	c, err := p.r.ReadByte()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return 0, errTruncated
		}
		return 0, err
	}
	if p.left > 0 {
		p.left--
	}
	return c, nil
}

func (p *pbReader) varint() (uint64, error) {
	var v uint64
	for i := 0; i < 10; i++ {
		c, err := p.byte()
		if err != nil {
			return 0, err
		}
		if i == 9 && c > 1 {
			break // bits past the 64th, which proto refuses
		}
		v |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			return v, nil
		}
	}
	return 0, errors.New("varint overflows")
}

// discard skips n bytes.
func (p *pbReader) discard(n uint64) error {
	if p.left >= 0 && n > uint64(p.left) {
		return errTruncated
	}
	got, err := p.r.Discard(int(n))
	if p.left > 0 {
		p.left -= int64(got)
	}
	if err != nil {
		if errors.Is(err, io.EOF) {
			return errTruncated
		}
		return err
	}
	return nil
}

// bytes reads a length-delimited value into p.buf, which it returns.
func (p *pbReader) bytes() ([]byte, error) {
	n, err := p.varint()
	if err != nil {
		return nil, err
	}
	if p.left >= 0 && n > uint64(p.left) || n > maxMessage {
		return nil, errTruncated
	}
	if uint64(cap(p.buf)) < n {
		p.buf = make([]byte, n)
	}
	p.buf = p.buf[:n]
	if _, err := io.ReadFull(p.r, p.buf); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errTruncated
		}
		return nil, err
	}
	if p.left > 0 {
		p.left -= int64(n)
	}
	return p.buf, nil
}

// take reads n bytes into a new slice (nil for none).
func (p *pbReader) take(n uint64) ([]byte, error) {
	if p.left >= 0 && n > uint64(p.left) {
		return nil, errTruncated
	}
	if n == 0 {
		return nil, nil
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(p.r, b); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, errTruncated
		}
		return nil, err
	}
	if p.left > 0 {
		p.left -= int64(n)
	}
	return b, nil
}

// copyN copies the next n bytes to w.
func (p *pbReader) copyN(w io.Writer, n uint64) error {
	if p.left >= 0 && n > uint64(p.left) {
		return errTruncated
	}
	got, err := io.CopyN(w, p.r, int64(n))
	if p.left > 0 {
		p.left -= got
	}
	if errors.Is(err, io.EOF) {
		return errTruncated
	}
	return err
}

// maxMessage bounds one length-delimited value read into memory: a name's
// entry is small; a corrupt length must not allocate gigabytes.
const maxMessage = 64 << 20

func (p *pbReader) skip(typ protowire.Type) error {
	switch typ {
	case protowire.VarintType:
		_, err := p.varint()
		return err
	case protowire.Fixed32Type:
		return p.discard(4)
	case protowire.Fixed64Type:
		return p.discard(8)
	case protowire.BytesType:
		n, err := p.varint()
		if err != nil {
			return err
		}
		return p.discard(n)
	}
	return fmt.Errorf("unsupported wire type %d", typ)
}

// eachName is EachName over the stream.
func (p *pbReader) eachName(name func(host, info []byte) error, zone func(string) error) error {
	for {
		num, typ, err := p.tag()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("name table: %w", err)
		}
		switch {
		case num == fieldNameTableTable && typ == protowire.BytesType && name == nil:
			if err := p.skip(typ); err != nil {
				return fmt.Errorf("name table entry: %w", err)
			}
		case num == fieldNameTableTable && typ == protowire.BytesType:
			entry, err := p.bytes()
			if err != nil {
				return fmt.Errorf("name table entry: %w", err)
			}
			host, info, err := MapEntry(entry)
			if err != nil {
				return err
			}
			if err := name(host, info); err != nil {
				return err
			}
		case num == fieldNameTableZones && typ == protowire.BytesType:
			z, err := p.bytes()
			if err != nil {
				return fmt.Errorf("name table zone: %w", err)
			}
			if zone == nil {
				continue
			}
			if err := zone(string(z)); err != nil {
				return err
			}
		default:
			if err := p.skip(typ); err != nil {
				return fmt.Errorf("name table field %d: %w", num, err)
			}
		}
	}
}
