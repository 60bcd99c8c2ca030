package namewire

import (
	"errors"
	"strconv"

	"google.golang.org/protobuf/encoding/protowire"
)

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

// AppendDeltaBase appends a NameTableDelta's base version, made of the
// parts joined (the control plane names the version an agent holds from
// the view's and its settings' without joining them in a new string).
func AppendDeltaBase(b []byte, base ...string) []byte {
	if len(base) == 1 {
		return appendField(b, fieldDeltaBase, base[0])
	}
	return appendJoined(b, fieldDeltaBase, base)
}

// appendJoined appends a length-delimited field holding the parts joined.
func appendJoined(b []byte, num protowire.Number, parts []string) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(n))
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

// AppendSettingsHead appends the tag and length of the settings field of
// a NameTable (full) or of a NameTableDelta, holding an AgentSettings of
// size bytes marshalled, which follows it: the control plane composes an
// agent's settings once and sends their bytes from where they are kept.
// Fields may come in any order and a decoder merges them, so the field
// goes after the table's or delta's other fields.
func AppendSettingsHead(b []byte, full bool, size int) []byte {
	num := protowire.Number(fieldDeltaSettings)
	if full {
		num = fieldNameTableSettings
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(size))
}

// AppendSettingsPolicy appends an AgentSettings' policy field holding
// policy, a DNSPolicy marshalled. The control plane marshals a policy that
// many agents share once (a thousand rules are 40 KB) and sends this field
// before the rest of each agent's settings marshalled without it: the
// policy is field 1, so the two pieces are what the generated code writes
// for the whole, in field number order.
func AppendSettingsPolicy(b, policy []byte) []byte {
	return appendBytesField(b, fieldSettingsPolicy, policy)
}

// AppendDeltaUpserted appends one upserted name of a NameTableDelta, its
// NameInfo marshalled.
func AppendDeltaUpserted(b []byte, host string, info []byte) []byte {
	return appendMapEntry(b, fieldDeltaUpserted, host, info)
}

// AppendDeltaRemoved appends one removed name of a NameTableDelta.
func AppendDeltaRemoved(b []byte, host string) []byte {
	return appendField(b, fieldDeltaRemoved, host)
}

// AppendDeltaZones appends a NameTableDelta's new zone set (present even
// when empty: the zones were emptied).
func AppendDeltaZones(b []byte, zones []string) []byte {
	return appendMessage(b, fieldDeltaZones, func(b []byte) []byte {
		return appendStrings(b, fieldZoneSetZones, zones)
	})
}

// appendBytesField appends a length-delimited field holding v.
func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

// MaxNonceField is the most AppendNonce appends: tag, length, up to 20
// decimal digits.
const MaxNonceField = 1 + 1 + 20

// AppendNonce appends a StreamNameTableResponse's nonce, in decimal.
// Fields may come in any order and a decoder merges them, so a nonce
// appended to a response encoded once for many agents makes that agent's
// response without copying the rest.
func AppendNonce(b []byte, nonce uint64) []byte {
	b = protowire.AppendTag(b, FieldResponseNonce, protowire.BytesType)
	n := len(b)
	b = append(b, 0)
	b = strconv.AppendUint(b, nonce, 10)
	b[n] = byte(len(b) - n - 1) // at most 20 digits: a one-byte varint
	return b
}

// SplitResponse splits a response written by AppendFullResponse or
// AppendDeltaResponse: whether it holds a full table, and the body of its
// table or delta field.
func SplitResponse(b []byte) (full bool, body []byte, err error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 || num != FieldResponseVersion || typ != protowire.BytesType {
		return false, nil, errors.New("response does not start with its version")
	}
	b = b[n:]
	if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
		return false, nil, protowire.ParseError(n)
	}
	b = b[n:]
	num, typ, n = protowire.ConsumeTag(b)
	if n < 0 || (num != FieldResponseFull && num != FieldResponseDelta) || typ != protowire.BytesType {
		return false, nil, errors.New("response has no table or delta after its version")
	}
	b = b[n:]
	body, n = protowire.ConsumeBytes(b)
	if n < 0 || n != len(b) {
		return false, nil, errors.New("response: bad table or delta field")
	}
	return num == FieldResponseFull, body, nil
}

// ResponseHeadSize is the length of what AppendResponseHead appends for a
// version of vlen bytes and a table or delta of size bytes.
func ResponseHeadSize(vlen, size int) int {
	return protowire.SizeTag(FieldResponseVersion) + protowire.SizeBytes(vlen) +
		protowire.SizeTag(FieldResponseFull) + protowire.SizeVarint(uint64(size))
}

// AppendResponseHead appends the head of a StreamNameTableResponse whose
// full table (or delta, when not full) of size bytes follows it: the
// version, made of the parts joined, and the tag and length of the table
// or delta.
func AppendResponseHead(b []byte, full bool, size int, version ...string) []byte {
	b = appendJoined(b, FieldResponseVersion, version)
	num := protowire.Number(FieldResponseDelta)
	if full {
		num = FieldResponseFull
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(size))
}
