package agent

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"slices"

	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// convertTableFile turns the JSON form of a NameTable (the
// --nametable-file format, protojson's) into entries and zones, one name
// at a time: each name's object is decoded (namewire, as protojson reads
// it) into one reused NameInfo and
// then through the same converter as a streamed table. Decoding the whole
// file into a NameTable first held every name twice (the message and the
// entries) beside the table being built: 144 MB of peak RSS for a 100,000
// name file whose agent then runs in 45 MB, and a second of protojson.
//
// It accepts what protojson accepts for a NameTable: the fields "table"
// and "authoritative_zones" (or "authoritativeZones"), each at most once;
// anything else is an error, like protojson's unknown fields.
func convertTableFile(b []byte, lim Limits) ([]nametable.Entry, []string, error) {
	return readTableFile(bytes.NewReader(b), newCollector(0, lim.withDefaults()))
}

// buildTableFile is convertTableFile feeding each name straight into the
// table's builder, so the converted entries are never held whole beside the
// table being built. It returns the table and its number of names.
func buildTableFile(b []byte, lim Limits, pod nametable.Context) (*nametable.Table, int, error) {
	head, err := scanTableFile(bytes.NewReader(b))
	if err != nil {
		return nil, 0, err
	}
	return buildTableFileFrom(bytes.NewReader(b), head, lim, pod)
}

// buildTableFileFrom is buildTableFile reading the file from r, after a
// first pass (scanTableFile) found head: the file is streamed through the
// decoder, never whole in memory (20 MB of protojson at 100,000 names
// beside the table being built), and checked to be the content head was
// read from.
func buildTableFileFrom(r io.Reader, head fileHead, lim Limits, pod nametable.Context) (*nametable.Table, int, error) {
	c, zones, err := newBuildingCollector(head.zones, lim.withDefaults(), pod)
	if err != nil {
		return nil, 0, err
	}
	h := sha256.New()
	if _, got, err := readTableFile(io.TeeReader(r, h), c); err != nil {
		return nil, 0, err
	} else if !slices.Equal(got, zones) {
		// Field names differing only in case reach encoding/json's
		// fields but not protojson's.
		return nil, 0, fmt.Errorf("zones %q, not %q: a field name in another case?", got, zones)
	}
	if _, err := io.Copy(h, r); err != nil {
		return nil, 0, err
	}
	if [sha256.Size]byte(h.Sum(nil)) != head.sum {
		return nil, 0, errors.New("the file changed while it was read")
	}
	return c.into.Table(), c.n, nil
}

// readTableFile reads the file's names into c and returns c's entries (none
// when c builds a table) and the zones.
func readTableFile(r io.Reader, c *collector) ([]nametable.Entry, []string, error) {
	var (
		zones    []string
		sawTable bool
		info     = new(namewire.NameInfo)
	)
	err := walkTableFile(bufio.NewReaderSize(r, 32<<10), func(host string, raw []byte) error {
		if err := info.DecodeJSON(raw); err != nil {
			return fmt.Errorf("table[%q]: %w", host, err)
		}
		return c.add(host, info)
	}, func(names []string) error {
		var err error
		zones, err = convertZones(names)
		return err
	}, func() { sawTable = true })
	if err != nil {
		return nil, nil, err
	}
	if c.into != nil || !sawTable {
		return nil, zones, nil
	}
	return c.done(), zones, nil
}

// walkTableFile reads a table file's one JSON object from r as protojson
// reads a NameTable: the fields "table" and "authoritative_zones" (or
// "authoritativeZones"), each at most once, nothing after the object; keys
// and zones as protojson reads strings (internal/namewire). It calls name
// with each name of the table and the raw JSON of its NameInfo (valid
// during the call; checked only to be one value, which the NameInfo's
// decoder then reads), zones with the zone list, and table when the table
// field is there (even null or empty).
//
// A hand scanner over the stream (jsonSkim), not encoding/json's Decoder:
// its Token made about six allocations per name.
func walkTableFile(r *bufio.Reader, name func(host string, raw []byte) error, zones func([]string) error, table func()) error {
	s := &jsonSkim{r: r}
	if c, err := s.next(); err != nil || c != '{' {
		return errJSONSyntax
	}
	var sawTable, sawZones bool
	err := s.members(func(rawKey []byte) (bool, error) {
		field, err := namewire.UnquoteJSON(rawKey)
		if err != nil {
			return false, fmt.Errorf("field name: %w", err)
		}
		switch field {
		case "table":
			if sawTable {
				return false, errors.New(`duplicate field "table"`)
			}
			sawTable = true
			table()
			return true, walkNames(s, name)
		case "authoritative_zones", "authoritativeZones":
			if sawZones {
				return false, fmt.Errorf("duplicate field %q", field)
			}
			sawZones = true
			raw, err := s.value(true)
			if err != nil {
				return false, fmt.Errorf("%s: %w", field, err)
			}
			list, err := namewire.DecodeJSONStrings(raw)
			if err != nil {
				return false, fmt.Errorf("%s: %w", field, err)
			}
			return true, zones(list)
		}
		return false, fmt.Errorf("unknown field %q", field)
	})
	if err != nil {
		return err
	}
	switch _, err := s.next(); {
	case err == nil:
		return errors.New("data after the table object")
	case !errors.Is(err, io.ErrUnexpectedEOF):
		return err
	}
	return nil
}

// walkNames reads the table field's value: null (no names, as protojson
// reads it) or an object of names.
func walkNames(s *jsonSkim, name func(host string, raw []byte) error) error {
	c, err := s.next()
	if err != nil {
		return fmt.Errorf("table: %w", err)
	}
	if c != '{' {
		s.r.UnreadByte()
		raw, err := s.value(true)
		if err != nil || string(raw) != "null" {
			return fmt.Errorf("table: want an object, got %.20q", raw)
		}
		return nil
	}
	var memberErr error // what the member function returned, unwrapped
	err = s.members(func(rawKey []byte) (bool, error) {
		memberErr = func() error {
			host, err := namewire.UnquoteJSON(rawKey)
			if err != nil {
				return fmt.Errorf("table: name: %w", err)
			}
			raw, err := s.value(true)
			if err != nil {
				return fmt.Errorf("table[%q]: %w", host, err)
			}
			return name(host, raw)
		}()
		return true, memberErr
	})
	if err != nil && err != memberErr {
		return fmt.Errorf("table: %w", err)
	}
	return err
}
