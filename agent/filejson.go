package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
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
	err := walkTableFile(json.NewDecoder(r), func(host string, raw json.RawMessage) error {
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

// walkTableFile reads a table file's one JSON object from dec as protojson
// reads a NameTable: the fields "table" and "authoritative_zones" (or
// "authoritativeZones"), each at most once, nothing after the object. It
// calls name with each name of the table and the raw JSON of its NameInfo
// (valid during the call), zones with the zone list, and table when the
// table field is there (even null or empty).
func walkTableFile(dec *json.Decoder, name func(host string, raw json.RawMessage) error, zones func([]string) error, table func()) error {
	if err := expectDelim(dec, '{'); err != nil {
		return err
	}
	var (
		sawTable, sawZones bool
		raw                json.RawMessage
		zoneNames          []string
	)
	for dec.More() {
		field, err := stringToken(dec)
		if err != nil {
			return err
		}
		switch field {
		case "table":
			if sawTable {
				return errors.New(`duplicate field "table"`)
			}
			sawTable = true
			table()
			tok, err := dec.Token()
			if err != nil {
				return fmt.Errorf("table: %w", err)
			}
			if tok == nil {
				continue // null: no names, as protojson reads it
			}
			if d, ok := tok.(json.Delim); !ok || d != '{' {
				return fmt.Errorf("table: want an object, got %v", tok)
			}
			for dec.More() {
				host, err := stringToken(dec)
				if err != nil {
					return fmt.Errorf("table: %w", err)
				}
				raw = raw[:0]
				if err := dec.Decode(&raw); err != nil {
					return fmt.Errorf("table[%q]: %w", host, err)
				}
				if err := name(host, raw); err != nil {
					return err
				}
			}
			if err := expectDelim(dec, '}'); err != nil {
				return fmt.Errorf("table: %w", err)
			}
		case "authoritative_zones", "authoritativeZones":
			if sawZones {
				return fmt.Errorf("duplicate field %q", field)
			}
			sawZones = true
			zoneNames = zoneNames[:0]
			if err := dec.Decode(&zoneNames); err != nil {
				return fmt.Errorf("%s: %w", field, err)
			}
			if err := zones(zoneNames); err != nil {
				return err
			}
		default:
			return fmt.Errorf("unknown field %q", field)
		}
	}
	if err := expectDelim(dec, '}'); err != nil {
		return err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errors.New("data after the table object")
	}
	return nil
}

func expectDelim(dec *json.Decoder, want json.Delim) error {
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != want {
		return fmt.Errorf("want %q, got %v", want, tok)
	}
	return nil
}

func stringToken(dec *json.Decoder) (string, error) {
	tok, err := dec.Token()
	if err != nil {
		return "", err
	}
	s, ok := tok.(string)
	if !ok {
		return "", fmt.Errorf("want a string, got %v", tok)
	}
	return s, nil
}
