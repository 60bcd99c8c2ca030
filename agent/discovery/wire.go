package discovery

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// The client keeps the applied table in its wire form (a marshalled
// NameTable) and applies deltas to it there: decoding the base of every
// delta, and the persisted table at every restart, held a second copy of
// the whole table in proto messages (~40 MB at 100,000 names) for a moment,
// on top of the lookup table being built; that moment is the pod's peak.

// Field numbers of meshdns.v1 messages read here without decoding them.
const (
	fieldNameTableTable = 1 // map<string, NameInfo> table
	fieldNameTableZones = 2 // repeated string authoritative_zones
	fieldMapKey         = 1
	fieldResponseFull   = 3 // StreamNameTableResponse.full
	fieldResponseVer    = 1 // StreamNameTableResponse.version_info
)

// EachName calls name for every entry of the wire-form NameTable b, with the
// entry's key and its NameInfo still marshalled, and zone for every
// authoritative zone, in the order they appear.
func EachName(b []byte, name func(host string, info []byte) error, zone func(z string) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("name table: %w", protowire.ParseError(n))
		}
		b = b[n:]
		switch {
		case num == fieldNameTableTable && typ == protowire.BytesType:
			entry, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return fmt.Errorf("name table entry: %w", protowire.ParseError(n))
			}
			b = b[n:]
			host, info, err := mapEntry(entry)
			if err != nil {
				return err
			}
			if err := name(host, info); err != nil {
				return err
			}
		case num == fieldNameTableZones && typ == protowire.BytesType:
			z, n := protowire.ConsumeString(b)
			if n < 0 {
				return fmt.Errorf("name table zone: %w", protowire.ParseError(n))
			}
			b = b[n:]
			if err := zone(z); err != nil {
				return err
			}
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return fmt.Errorf("name table field %d: %w", num, protowire.ParseError(n))
			}
			b = b[n:]
		}
	}
	return nil
}

// mapEntry splits a map<string, NameInfo> entry into its key and its
// marshalled value (empty when absent, as proto reads it).
func mapEntry(b []byte) (string, []byte, error) {
	var key string
	var val []byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", nil, fmt.Errorf("name table entry: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.BytesType || (num != fieldMapKey && num != 2) {
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return "", nil, fmt.Errorf("name table entry: %w", protowire.ParseError(n))
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return "", nil, fmt.Errorf("name table entry: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if num == fieldMapKey {
			key = string(v)
		} else {
			val = v
		}
	}
	return key, val, nil
}

// applyDeltaWire returns base (a wire-form NameTable) with d applied, in
// wire form: base's entries that d neither removes nor replaces are copied
// as they are; only the upserted names are marshalled.
func applyDeltaWire(base []byte, d *meshdnsv1.NameTableDelta) ([]byte, error) {
	drop := make(map[string]struct{}, len(d.GetRemoved())+len(d.GetUpserted()))
	for _, k := range d.GetRemoved() {
		drop[k] = struct{}{}
	}
	for k := range d.GetUpserted() {
		drop[k] = struct{}{}
	}
	out := make([]byte, 0, len(base)+64*len(d.GetUpserted()))
	var zones []string
	err := EachName(base, func(host string, info []byte) error {
		if _, ok := drop[host]; ok {
			return nil
		}
		out = appendEntry(out, host, info)
		return nil
	}, func(z string) error {
		zones = append(zones, z)
		return nil
	})
	if err != nil {
		return nil, err
	}
	for k, v := range d.GetUpserted() {
		info, err := proto.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("marshal %q: %w", k, err)
		}
		out = appendEntry(out, k, info)
	}
	if z := d.GetAuthoritativeZones(); z != nil {
		zones = z.GetZones()
	}
	for _, z := range zones {
		out = protowire.AppendTag(out, fieldNameTableZones, protowire.BytesType)
		out = protowire.AppendString(out, z)
	}
	return out, nil
}

// appendEntry appends one map<string, NameInfo> entry of a NameTable.
func appendEntry(b []byte, host string, info []byte) []byte {
	size := protowire.SizeTag(fieldMapKey) + protowire.SizeBytes(len(host)) +
		protowire.SizeTag(2) + protowire.SizeBytes(len(info))
	b = protowire.AppendTag(b, fieldNameTableTable, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(size))
	b = protowire.AppendTag(b, fieldMapKey, protowire.BytesType)
	b = protowire.AppendString(b, host)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	return protowire.AppendBytes(b, info)
}

// stateTable returns the version and the wire-form table of a persisted
// StreamNameTableResponse, without decoding the table.
func stateTable(b []byte) (string, []byte, error) {
	var version string
	var table []byte
	found := false
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return "", nil, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case num == fieldResponseVer && typ == protowire.BytesType:
			v, n := protowire.ConsumeString(b)
			if n < 0 {
				return "", nil, protowire.ParseError(n)
			}
			version, b = v, b[n:]
		case num == fieldResponseFull && typ == protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return "", nil, protowire.ParseError(n)
			}
			// A repeated embedded message would be merged by proto;
			// the client never writes one twice.
			table, b, found = v, b[n:], true
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return "", nil, protowire.ParseError(n)
			}
			b = b[n:]
		}
	}
	if !found {
		return "", nil, errNoTable
	}
	return version, table, nil
}

var errNoTable = errors.New("holds no table")
