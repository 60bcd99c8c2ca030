package namewire

import "google.golang.org/protobuf/encoding/protowire"

// The control plane encodes its responses here, by hand, from the names'
// NameInfos marshalled once (registry candidates) instead of building a
// NameTable and calling proto.Marshal: a full table of 10,000 names then
// costs one append per name, and the NameInfo of an unchanged name is
// never marshalled twice. Every field is written, even empty (a delta's
// base version may be ""). FuzzResponseEncode checks the output against
// proto.Unmarshal of the generated types.

// AppendFullResponse appends a StreamNameTableResponse of version holding
// the full table (a marshalled NameTable: AppendEntry, AppendZone).
func AppendFullResponse(b []byte, version string, table []byte) []byte {
	b = appendField(b, FieldResponseVersion, version)
	return appendBytesField(b, FieldResponseFull, table)
}

// AppendDeltaResponse appends a StreamNameTableResponse of version holding
// the delta (a marshalled NameTableDelta: AppendDeltaBase,
// AppendDeltaUpserted, AppendDeltaRemoved, AppendDeltaZones).
func AppendDeltaResponse(b []byte, version string, delta []byte) []byte {
	b = appendField(b, FieldResponseVersion, version)
	return appendBytesField(b, FieldResponseDelta, delta)
}

// AppendDeltaBase appends a NameTableDelta's base version.
func AppendDeltaBase(b []byte, base string) []byte {
	return appendField(b, FieldDeltaBase, base)
}

// AppendDeltaUpserted appends one upserted name of a NameTableDelta, its
// NameInfo marshalled.
func AppendDeltaUpserted(b []byte, host string, info []byte) []byte {
	return appendMapEntry(b, FieldDeltaUpserted, host, info)
}

// AppendDeltaRemoved appends one removed name of a NameTableDelta.
func AppendDeltaRemoved(b []byte, host string) []byte {
	return appendField(b, FieldDeltaRemoved, host)
}

// AppendDeltaZones appends a NameTableDelta's new zone set (present even
// when empty: the zones were emptied).
func AppendDeltaZones(b []byte, zones []string) []byte {
	return appendMessage(b, FieldDeltaZones, func(b []byte) []byte {
		return appendStrings(b, FieldZoneSetZones, zones)
	})
}

// appendBytesField appends a length-delimited field holding v.
func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}
