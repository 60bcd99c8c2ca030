package namewire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
)

// maxStreamValue bounds one entry or zone read by EachNameFrom into
// memory: an entry is small; a corrupt length must not allocate gigabytes.
const maxStreamValue = 64 << 20

// EachNameFrom is EachName reading the marshalled NameTable from r through
// a small buffer, so a table on disk is never held whole: it calls name
// for every entry and zone for every zone, in the order they appear (both
// valid during the call).
func EachNameFrom(r io.Reader, name func(host, info []byte) error, zone func(z string) error) error {
	br := bufio.NewReaderSize(r, 32<<10)
	var buf []byte
	for {
		tag, err := binary.ReadUvarint(br)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("name table: %w", unexpected(err))
		}
		num, typ := protowire.DecodeTag(tag)
		if num < protowire.MinValidNumber {
			return fmt.Errorf("name table: bad field number %d", num)
		}
		if typ != protowire.BytesType {
			if err := skipValue(br, typ); err != nil {
				return fmt.Errorf("name table field %d: %w", num, err)
			}
			continue
		}
		n, err := binary.ReadUvarint(br)
		if err != nil {
			return fmt.Errorf("name table field %d: %w", num, unexpected(err))
		}
		want := (num == fieldNameTableTable && name != nil) || (num == fieldNameTableZones && zone != nil)
		if !want {
			if _, err := br.Discard(int(min(n, maxStreamValue+1))); err != nil || n > maxStreamValue {
				return fmt.Errorf("name table field %d: %w", num, unexpected(err))
			}
			continue
		}
		if n > maxStreamValue {
			return fmt.Errorf("name table field %d: %d bytes", num, n)
		}
		if uint64(cap(buf)) < n {
			buf = make([]byte, n)
		}
		buf = buf[:n]
		if _, err := io.ReadFull(br, buf); err != nil {
			return fmt.Errorf("name table field %d: %w", num, unexpected(err))
		}
		if num == fieldNameTableTable {
			host, info, err := MapEntry(buf)
			if err != nil {
				return err
			}
			if err := name(host, info); err != nil {
				return err
			}
			continue
		}
		z, err := str(buf, "authoritative_zones")
		if err != nil {
			return err
		}
		if err := zone(z); err != nil {
			return err
		}
	}
}

// skipValue reads past a value of a wire type other than bytes.
func skipValue(br *bufio.Reader, typ protowire.Type) error {
	switch typ {
	case protowire.VarintType:
		_, err := binary.ReadUvarint(br)
		return unexpected(err)
	case protowire.Fixed32Type:
		_, err := br.Discard(4)
		return unexpected(err)
	case protowire.Fixed64Type:
		_, err := br.Discard(8)
		return unexpected(err)
	}
	return fmt.Errorf("unsupported wire type %d", typ)
}

// unexpected is err with an end of input inside a value said so.
func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
