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
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("%s: %w", what, protowire.ParseError(n))
		}
		if num > protowire.MaxValidNumber {
			return fmt.Errorf("%s: field number %d out of range", what, num)
		}
		b = b[n:]
		var (
			v []byte
			x uint64
		)
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return fmt.Errorf("%s field %d: %w", what, num, protowire.ParseError(n))
		}
		b = b[n:]
		if typ != protowire.BytesType && typ != protowire.VarintType {
			if strict {
				return unknownSetting(what, num, typ)
			}
			continue
		}
		if err := field(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
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

// Unmarshal decodes a marshalled NameInfo into m, which it resets first
// (keeping its slices' capacity, so one NameInfo decodes a table's names
// one after another with few allocations).
func (m *NameInfo) Unmarshal(b []byte) error {
	m.Reset()
	return walk(b, "name info", func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		if typ == protowire.VarintType {
			if num == fieldInfoTTL {
				m.TTL = uint32(x)
			}
			return nil
		}
		var err error
		switch num {
		case fieldInfoIPs:
			var s string
			s, err = str(v, "ips")
			m.IPs = append(m.IPs, s)
		case fieldInfoRegistry:
			m.Registry, err = m.sharedStr(v, "registry")
		case fieldInfoShortname:
			m.Shortname, err = str(v, "shortname")
		case fieldInfoNamespace:
			m.Namespace, err = m.sharedStr(v, "namespace")
		case fieldInfoAltHosts:
			var s string
			s, err = str(v, "alt_hosts")
			m.AltHosts = append(m.AltHosts, s)
		case fieldInfoPorts:
			m.Ports = append(m.Ports, Port{})
			err = m.Ports[len(m.Ports)-1].unmarshal(v, m)
		case fieldInfoEndpoints:
			m.Endpoints = append(m.Endpoints, Endpoint{})
			err = m.Endpoints[len(m.Endpoints)-1].unmarshal(v)
		case fieldInfoCanonical:
			m.CanonicalName, err = str(v, "canonical_name")
		}
		return err
	})
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

// unmarshal decodes b into p, sharing strings through info.
func (p *Port) unmarshal(b []byte, info *NameInfo) error {
	return walk(b, "port", func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		var err error
		switch {
		case num == fieldPortPort && typ == protowire.VarintType:
			p.Port = uint32(x)
		case num == fieldPortName && typ == protowire.BytesType:
			p.Name, err = info.sharedStr(v, "port name")
		case num == fieldPortProtocol && typ == protowire.BytesType:
			p.Protocol, err = info.sharedStr(v, "port protocol")
		}
		return err
	})
}

func (e *Endpoint) unmarshal(b []byte) error {
	return walk(b, "endpoint", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		var err error
		switch num {
		case fieldEndpointHostname:
			e.Hostname, err = str(v, "endpoint hostname")
		case fieldEndpointIPs:
			var s string
			s, err = str(v, "endpoint ips")
			e.IPs = append(e.IPs, s)
		case fieldEndpointZone:
			e.Zone, err = str(v, "endpoint zone")
		case fieldEndpointForZones:
			var s string
			s, err = str(v, "endpoint for_zones")
			e.ForZones = append(e.ForZones, s)
		}
		return err
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
		case FieldMapKey:
			// Every key proto reads is checked, the last one kept.
			if err := checkStr(v, "map key"); err != nil {
				return err
			}
			key = v
		case FieldMapValue:
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
		case FieldNameTableTable:
			if name == nil {
				return nil
			}
			host, info, err := MapEntry(v)
			if err != nil {
				return err
			}
			return name(host, info)
		case FieldNameTableZones:
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

// UnmarshalNameTable decodes a marshalled NameTable whole (for the debug
// dump, not the update path). A name given twice keeps its last value, as
// proto does.
func UnmarshalNameTable(b []byte) (*NameTable, error) {
	t := &NameTable{Table: map[string]*NameInfo{}}
	settings, err := TableSettings(b)
	if err != nil {
		return nil, err
	}
	t.Settings = settings
	err = EachName(b, func(host, raw []byte) error {
		info := new(NameInfo)
		if err := info.Unmarshal(raw); err != nil {
			return fmt.Errorf("name %q: %w", host, err)
		}
		t.Table[string(host)] = info
		return nil
	}, func(z string) error {
		t.AuthoritativeZones = append(t.AuthoritativeZones, z)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return t, nil
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
	b = protowire.AppendTag(b, FieldNameTableTable, protowire.BytesType)
	size := protowire.SizeTag(FieldMapKey) + protowire.SizeBytes(len(host)) +
		protowire.SizeTag(FieldMapValue) + protowire.SizeBytes(len(info))
	b = protowire.AppendVarint(b, uint64(size))
	b = protowire.AppendTag(b, FieldMapKey, protowire.BytesType)
	b = append(protowire.AppendVarint(b, uint64(len(host))), host...)
	b = protowire.AppendTag(b, FieldMapValue, protowire.BytesType)
	return protowire.AppendBytes(b, info)
}

// AppendZone appends one authoritative zone of a NameTable.
func AppendZone(b []byte, zone string) []byte {
	b = protowire.AppendTag(b, FieldNameTableZones, protowire.BytesType)
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
