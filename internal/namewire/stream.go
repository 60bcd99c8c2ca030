package namewire

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of the stream's messages (proto/meshdns/v1/discovery.proto).
const (
	fieldIdentityPod       = 1
	fieldIdentityNamespace = 2
	fieldIdentityDomain    = 3
	fieldIdentityInstance  = 4
	fieldIdentityVersion   = 5

	fieldRequestIdentity = 1
	fieldRequestVersion  = 2
	fieldRequestNonce    = 3
	fieldRequestError    = 4

	fieldErrorCode    = 1
	fieldErrorMessage = 2

	// FieldResponseVersion, FieldResponseNonce, FieldResponseFull and
	// FieldResponseDelta number StreamNameTableResponse's fields, for the
	// agent's reader, which takes a response from the stream field by
	// field (a full table goes to a file, not into memory).
	FieldResponseVersion = 1
	FieldResponseNonce   = 2
	FieldResponseFull    = 3
	FieldResponseDelta   = 4

	fieldDeltaBase     = 1
	fieldDeltaUpserted = 2
	fieldDeltaRemoved  = 3
	fieldDeltaZones    = 4

	fieldZoneSetZones = 1
)

// Append appends r marshalled, as the generated code writes it.
func (r *Request) Append(b []byte) []byte {
	if id := r.Identity; id != nil {
		b = appendMessage(b, fieldRequestIdentity, func(b []byte) []byte {
			b = appendString(b, fieldIdentityPod, id.PodName)
			b = appendString(b, fieldIdentityNamespace, id.Namespace)
			b = appendString(b, fieldIdentityDomain, id.ClusterDomain)
			b = appendString(b, fieldIdentityInstance, id.InstanceID)
			return appendString(b, fieldIdentityVersion, id.AgentVersion)
		})
	}
	b = appendString(b, fieldRequestVersion, r.VersionInfo)
	b = appendString(b, fieldRequestNonce, r.ResponseNonce)
	if e := r.ErrorDetail; e != nil {
		b = appendMessage(b, fieldRequestError, func(b []byte) []byte {
			// int32 is sign-extended to 64 bits on the wire.
			b = appendVarint(b, fieldErrorCode, uint64(int64(e.Code)))
			return appendString(b, fieldErrorMessage, e.Message)
		})
	}
	return b
}

// UnmarshalDelta decodes a marshalled NameTableDelta. The upserted
// NameInfos stay in wire form (sub-slices of b, or copies where proto
// would merge several values of one entry), each checked to decode.
func UnmarshalDelta(b []byte) (*Delta, error) {
	d := new(Delta)
	index := map[string]int{} // upserted name -> position in d.Upserted
	err := walk(b, "delta", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case fieldDeltaBase:
			s, err := str(v, "base_version")
			d.BaseVersion = s
			return err
		case fieldDeltaUpserted:
			host, info, err := MapEntry(v)
			if err != nil {
				return fmt.Errorf("upserted: %w", err)
			}
			if err := CheckNameInfo(info); err != nil {
				return fmt.Errorf("upserted %q: %w", host, err)
			}
			if i, ok := index[string(host)]; ok {
				d.Upserted[i].Info = info // the last value of a key wins
				return nil
			}
			index[string(host)] = len(d.Upserted)
			d.Upserted = append(d.Upserted, RawName{Host: string(host), Info: info})
		case fieldDeltaRemoved:
			s, err := str(v, "removed")
			if err != nil {
				return err
			}
			d.Removed = append(d.Removed, s)
		case fieldDeltaZones:
			if d.AuthoritativeZones == nil {
				d.AuthoritativeZones = &ZoneSet{}
			}
			// Merged, as proto merges a repeated embedded message.
			return walk(v, "zone set", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if num != fieldZoneSetZones || typ != protowire.BytesType {
					return nil
				}
				z, err := str(v, "zones")
				d.AuthoritativeZones.Zones = append(d.AuthoritativeZones.Zones, z)
				return err
			})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return d, nil
}
