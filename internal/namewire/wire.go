package namewire

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
)

// ErrInvalidUTF8 is the error of a string field that is not UTF-8, which
// proto3 forbids.
var ErrInvalidUTF8 = errors.New("string field contains invalid UTF-8")

// walk calls field with each field of the message b that has a varint or
// length-delimited value (v for bytes, x for a varint), and skips the
// others, as proto.Unmarshal skips unknown fields; field decides which it
// knows. A malformed message is an error naming what.
func walk(b []byte, what string, field func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	return walkFields(b, what, false, field)
}

// walkStrict is walk for a message in which every field must be known
// (AgentSettings): a field of another wire type than varint or bytes is
// an ErrUnknownSetting error, and field returns one for the others it
// does not know.
func walkStrict(b []byte, what string, field func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	return walkFields(b, what, true, field)
}

func walkFields(b []byte, what string, strict bool, field func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	r := fieldReader{b: b, what: what}
	for {
		ok, err := r.next(strict)
		if err != nil || !ok {
			return err
		}
		v, x := r.v, r.x
		if r.typ == protowire.BytesType {
			x = 0
		} else {
			v = nil
		}
		if err := field(r.num, r.typ, v, x); err != nil {
			return err
		}
	}
}

// fieldReader reads a message's fields one after another, for the
// decoders that run once per name (a NameInfo and its ports and
// endpoints), which read them in loops rather than through walk's
// closures: a table's conversion reads millions of fields.
type fieldReader struct {
	b    []byte // the rest of the message
	what string // the message, for errors
	// The field last read: its number, its wire type (varint or bytes)
	// and its value, v for bytes, x for a varint (the other is stale).
	num protowire.Number
	typ protowire.Type
	v   []byte
	x   uint64
}

// next reads the next field with a varint or bytes value into r,
// skipping the others (strict: failing on them, as walkStrict does); it
// returns false at the end of the message. Most fields are strings and
// messages of a number below 16 and shorter than 128 bytes, their tag
// and length a byte each: next reads those itself, small enough to be
// inlined, and leaves the others to nextSlow.
func (r *fieldReader) next(strict bool) (bool, error) {
	if b := r.b; len(b) >= 2 && b[0]&0x87 == byte(protowire.BytesType) && b[0] >= 1<<3 && b[1] < 0x80 && int(b[1]) <= len(b)-2 {
		n := int(b[1]) + 2
		r.num, r.typ, r.v, r.b = protowire.Number(b[0]>>3), protowire.BytesType, b[2:n], b[n:]
		return true, nil
	}
	return r.nextSlow(strict)
}

// nextSlow is next for any field, and says what is wrong with a
// malformed one.
func (r *fieldReader) nextSlow(strict bool) (bool, error) {
	for len(r.b) > 0 {
		// A varint field of a number below 16 and a value below 128 is
		// two bytes too.
		if len(r.b) >= 2 && r.b[0]&7 == byte(protowire.VarintType) && r.b[0] >= 1<<3 && r.b[0] < 0x80 && r.b[1] < 0x80 {
			r.num, r.typ, r.x = protowire.Number(r.b[0]>>3), protowire.VarintType, uint64(r.b[1])
			r.b = r.b[2:]
			return true, nil
		}
		num, typ, n := protowire.ConsumeTag(r.b)
		if n < 0 {
			return false, fmt.Errorf("%s: %w", r.what, protowire.ParseError(n))
		}
		if num > protowire.MaxValidNumber {
			return false, fmt.Errorf("%s: field number %d out of range", r.what, num)
		}
		r.b = r.b[n:]
		switch typ {
		case protowire.BytesType:
			r.v, n = protowire.ConsumeBytes(r.b)
		case protowire.VarintType:
			r.x, n = protowire.ConsumeVarint(r.b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, r.b)
		}
		if n < 0 {
			return false, fmt.Errorf("%s field %d: %w", r.what, num, protowire.ParseError(n))
		}
		r.b = r.b[n:]
		if typ != protowire.BytesType && typ != protowire.VarintType {
			if strict {
				return false, unknownSetting(r.what, num, typ)
			}
			continue
		}
		r.num, r.typ = num, typ
		return true, nil
	}
	return false, nil
}

// str returns v as a string, checked to be UTF-8.
func str(v []byte, what string) (string, error) {
	if !utf8.Valid(v) {
		return "", fmt.Errorf("%s: %w", what, ErrInvalidUTF8)
	}
	return string(v), nil
}

// checkStr is str for a string that is not kept.
func checkStr(v []byte, what string) error {
	if !utf8.Valid(v) {
		return fmt.Errorf("%s: %w", what, ErrInvalidUTF8)
	}
	return nil
}

// CheckNameInfo reports whether b decodes as a NameInfo (what Unmarshal
// would say), keeping nothing.
func CheckNameInfo(b []byte) error {
	return walk(b, "name info", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case fieldInfoIPs, fieldInfoRegistry, fieldInfoShortname, fieldInfoNamespace, fieldInfoAltHosts, fieldInfoCanonical:
			return checkStr(v, "name info")
		case fieldInfoPorts:
			return walk(v, "port", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if typ == protowire.BytesType && (num == fieldPortName || num == fieldPortProtocol) {
					return checkStr(v, "port")
				}
				return nil
			})
		case fieldInfoEndpoints:
			return walk(v, "endpoint", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if typ == protowire.BytesType && (num == fieldEndpointHostname || num == fieldEndpointIPs ||
					num == fieldEndpointZone || num == fieldEndpointForZones) {
					return checkStr(v, "endpoint")
				}
				return nil
			})
		}
		return nil
	})
}

// MapEntry splits a marshalled map<string, NameInfo> entry into its key and
// its marshalled value, as proto reads one: a missing key is "", a missing
// value an empty NameInfo, and of several values the merge (their
// concatenation, copied; otherwise both results are sub-slices of b). The
// value is not decoded; the key is checked to be UTF-8.
func MapEntry(b []byte) (key, value []byte, err error) {
	var merged bool
	err = walk(b, "map entry", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case fieldMapKey:
			// Every key proto reads is checked, the last one kept.
			if err := checkStr(v, "map key"); err != nil {
				return err
			}
			key = v
		case fieldMapValue:
			if value == nil {
				value = v
				return nil
			}
			// A second value merges into the first, as proto merges a
			// repeated embedded message: proto decodes each on its own,
			// so each must be valid alone (two invalid halves can
			// concatenate to a valid whole).
			if !merged {
				if err := CheckNameInfo(value); err != nil {
					return fmt.Errorf("map value: %w", err)
				}
				value, merged = append(make([]byte, 0, len(value)+len(v)), value...), true
			}
			if err := CheckNameInfo(v); err != nil {
				return fmt.Errorf("map value: %w", err)
			}
			value = append(value, v...)
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if value == nil {
		value = []byte{}
	}
	return key, value, nil
}

// EachName calls name for every entry of the marshalled NameTable b, with
// the entry's key and its NameInfo still marshalled (both valid during the
// call), and zone for every authoritative zone, in the order they appear.
// A nil name or zone skips those. The NameInfos are not decoded, the
// settings skipped (TableSettings reads them).
func EachName(b []byte, name func(host, info []byte) error, zone func(z string) error) error {
	return walk(b, "name table", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case fieldNameTableTable:
			if name == nil {
				return nil
			}
			host, info, err := MapEntry(v)
			if err != nil {
				return err
			}
			return name(host, info)
		case fieldNameTableZones:
			if zone == nil {
				return nil
			}
			z, err := str(v, "authoritative_zones")
			if err != nil {
				return err
			}
			return zone(z)
		}
		return nil
	})
}

// appendString appends a string field unless it is empty (proto3's
// implicit presence).
func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	return appendField(b, num, s)
}

// appendStrings appends a repeated string field, every element.
func appendStrings(b []byte, num protowire.Number, ss []string) []byte {
	for _, s := range ss {
		b = appendField(b, num, s)
	}
	return b
}

// appendField appends a string field, even empty. Most are short and of
// a field number below 16: their tag and length are a byte each, written
// without protowire's general varint (a table file's conversion writes
// millions).
func appendField(b []byte, num protowire.Number, s string) []byte {
	if num < 16 && len(s) < 0x80 {
		return append(append(b, byte(num)<<3|byte(protowire.BytesType), byte(len(s))), s...)
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// appendVarint appends a varint field unless it is zero.
func appendVarint(b []byte, num protowire.Number, x uint64) []byte {
	if x == 0 {
		return b
	}
	if num < 16 && x < 0x80 {
		return append(b, byte(num)<<3|byte(protowire.VarintType), byte(x))
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, x)
}

// appendMessage appends an embedded message field whose body append
// writes, with its length in front.
func appendMessage(b []byte, num protowire.Number, body func([]byte) []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	// Room for a length of up to 127 bytes; moved when longer.
	at := len(b)
	b = append(b, 0)
	b = body(b)
	n := len(b) - at - 1
	if size := protowire.SizeVarint(uint64(n)); size > 1 {
		b = append(b, make([]byte, size-1)...)
		copy(b[at+size:], b[at+1:at+1+n])
	}
	protowire.AppendVarint(b[:at], uint64(n))
	return b
}

// Append appends m marshalled, in field number order as the generated
// code writes it.
func (m *NameInfo) Append(b []byte) []byte {
	b = appendStrings(b, fieldInfoIPs, m.IPs)
	b = appendString(b, fieldInfoRegistry, m.Registry)
	b = appendString(b, fieldInfoShortname, m.Shortname)
	b = appendString(b, fieldInfoNamespace, m.Namespace)
	b = appendStrings(b, fieldInfoAltHosts, m.AltHosts)
	for i := range m.Ports {
		p := &m.Ports[i]
		b = appendMessage(b, fieldInfoPorts, func(b []byte) []byte {
			b = appendString(b, fieldPortName, p.Name)
			b = appendVarint(b, fieldPortPort, uint64(p.Port))
			return appendString(b, fieldPortProtocol, p.Protocol)
		})
	}
	for i := range m.Endpoints {
		e := &m.Endpoints[i]
		b = appendMessage(b, fieldInfoEndpoints, func(b []byte) []byte {
			b = appendString(b, fieldEndpointHostname, e.Hostname)
			b = appendStrings(b, fieldEndpointIPs, e.IPs)
			b = appendString(b, fieldEndpointZone, e.Zone)
			return appendStrings(b, fieldEndpointForZones, e.ForZones)
		})
	}
	b = appendString(b, fieldInfoCanonical, m.CanonicalName)
	return appendVarint(b, fieldInfoTTL, uint64(m.TTL))
}

// AppendEntry appends one entry of a NameTable's table (the field with
// its key and marshalled NameInfo), as the generated code writes it.
func AppendEntry[S string | []byte](b []byte, host S, info []byte) []byte {
	return appendMapEntry(b, fieldNameTableTable, host, info)
}

// appendMapEntry appends field num, an entry of a map<string, NameInfo>
// whose value is marshalled.
func appendMapEntry[S string | []byte](b []byte, num protowire.Number, host S, info []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	size := protowire.SizeTag(fieldMapKey) + protowire.SizeBytes(len(host)) +
		protowire.SizeTag(fieldMapValue) + protowire.SizeBytes(len(info))
	b = protowire.AppendVarint(b, uint64(size))
	b = protowire.AppendTag(b, fieldMapKey, protowire.BytesType)
	b = append(protowire.AppendVarint(b, uint64(len(host))), host...)
	b = protowire.AppendTag(b, fieldMapValue, protowire.BytesType)
	return protowire.AppendBytes(b, info)
}

// AppendZone appends one authoritative zone of a NameTable.
func AppendZone(b []byte, zone string) []byte {
	b = protowire.AppendTag(b, fieldNameTableZones, protowire.BytesType)
	return protowire.AppendString(b, zone)
}

// Marshal returns t marshalled: its names sorted by key (as the generated
// code's deterministic marshalling orders them), then its zones and its
// settings.
func (t *NameTable) Marshal() []byte {
	var b, scratch []byte
	for _, k := range slices.Sorted(maps.Keys(t.Table)) {
		scratch = scratch[:0]
		if info := t.Table[k]; info != nil {
			scratch = info.Append(scratch)
		}
		b = AppendEntry(b, k, scratch)
	}
	for _, z := range t.AuthoritativeZones {
		b = AppendZone(b, z)
	}
	return AppendTableSettings(b, t.Settings)
}

// Walker walks a table name by name as EachName does: a served version's
// Walk, or EachName over marshalled bytes.
type Walker func(name func(host, info []byte) error, zone func(z string) error) error

// Collect decodes every name and zone walk gives into a NameTable (its
// Settings left nil), for a dump or a test: the walk itself keeps the
// names marshalled.
func Collect(walk Walker) (*NameTable, error) {
	nt := &NameTable{Table: map[string]*NameInfo{}}
	err := walk(func(host, raw []byte) error {
		info := new(NameInfo)
		if err := info.Unmarshal(raw); err != nil {
			return fmt.Errorf("name %q: %w", host, err)
		}
		nt.Table[string(host)] = info
		return nil
	}, func(z string) error {
		nt.AuthoritativeZones = append(nt.AuthoritativeZones, z)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return nt, nil
}
