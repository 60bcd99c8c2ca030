package view

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshdns/meshdns/internal/namewire"
)

// The responses are encoded by hand from the candidates' pre-encoded
// NameInfo bytes instead of building a NameTable and calling proto.Marshal:
// a full table of 10,000 names then costs one append per name, and the
// NameInfo of an unchanged name is never encoded twice. Field numbers are
// internal/namewire's (the one place they are written down);
// encode_test.go checks the output against proto.Unmarshal of the
// generated types.
const (
	respVersionInfo = namewire.FieldResponseVersion
	respFull        = namewire.FieldResponseFull
	respDelta       = namewire.FieldResponseDelta
	tableTable      = namewire.FieldNameTableTable
	tableZones      = namewire.FieldNameTableZones
	deltaBase       = namewire.FieldDeltaBase
	deltaUpserted   = namewire.FieldDeltaUpserted
	deltaRemoved    = namewire.FieldDeltaRemoved
	deltaZones      = namewire.FieldDeltaZones
	zoneSetZones    = namewire.FieldZoneSetZones
	mapKey          = namewire.FieldMapKey
	mapValue        = namewire.FieldMapValue
)

// appendString appends a length-delimited field.
func appendString(b []byte, num protowire.Number, s string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func appendBytes(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// appendMapEntry appends one map<string, NameInfo> entry whose value is
// already encoded.
func appendMapEntry(b []byte, num protowire.Number, key string, value []byte) []byte {
	n := protowire.SizeTag(mapKey) + protowire.SizeBytes(len(key)) +
		protowire.SizeTag(mapValue) + protowire.SizeBytes(len(value))
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	b = appendString(b, mapKey, key)
	return appendBytes(b, mapValue, value)
}

// appendMessage appends field num holding the message body (encoded by fill
// into a scratch buffer, since the length prefix comes first).
func appendMessage(b []byte, num protowire.Number, body []byte) []byte {
	return appendBytes(b, num, body)
}
