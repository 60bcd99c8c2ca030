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
	// FieldResponseDelta number StreamNameTableResponse's fields, for
	// readers that take a response from a stream field by field.
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

// Unmarshal decodes a marshalled StreamNameTableRequest into r (the control
// plane's side; the tests check Append with it).
func (r *Request) Unmarshal(b []byte) error {
	*r = Request{}
	return walk(b, "request", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		var err error
		switch num {
		case fieldRequestIdentity:
			if r.Identity == nil {
				r.Identity = new(AgentIdentity)
			}
			err = r.Identity.unmarshal(v)
		case fieldRequestVersion:
			r.VersionInfo, err = str(v, "version_info")
		case fieldRequestNonce:
			r.ResponseNonce, err = str(v, "response_nonce")
		case fieldRequestError:
			if r.ErrorDetail == nil {
				r.ErrorDetail = new(ErrorDetail)
			}
			err = r.ErrorDetail.unmarshal(v)
		}
		return err
	})
}

// unmarshal merges b into id, as proto merges a repeated embedded message.
func (id *AgentIdentity) unmarshal(b []byte) error {
	return walk(b, "identity", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		var err error
		switch num {
		case fieldIdentityPod:
			id.PodName, err = str(v, "pod_name")
		case fieldIdentityNamespace:
			id.Namespace, err = str(v, "namespace")
		case fieldIdentityDomain:
			id.ClusterDomain, err = str(v, "cluster_domain")
		case fieldIdentityInstance:
			id.InstanceID, err = str(v, "instance_id")
		case fieldIdentityVersion:
			id.AgentVersion, err = str(v, "agent_version")
		}
		return err
	})
}

func (e *ErrorDetail) unmarshal(b []byte) error {
	return walk(b, "error detail", func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		var err error
		switch {
		case num == fieldErrorCode && typ == protowire.VarintType:
			e.Code = int32(x)
		case num == fieldErrorMessage && typ == protowire.BytesType:
			e.Message, err = str(v, "error message")
		}
		return err
	})
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

// UnmarshalResponse decodes a marshalled StreamNameTableResponse held in
// memory; the full table stays in wire form (a sub-slice of b). As in
// proto, a later field of the oneof replaces an earlier one.
func UnmarshalResponse(b []byte) (*Response, error) {
	r := new(Response)
	var delta []byte // the delta's bytes, for a second one to merge into
	err := walk(b, "response", func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return nil
		}
		var err error
		switch num {
		case FieldResponseVersion:
			r.VersionInfo, err = str(v, "version_info")
		case FieldResponseNonce:
			r.Nonce, err = str(v, "nonce")
		case FieldResponseFull:
			if r.Full != nil {
				// Two of one embedded message merge: their concatenation.
				v = append(append([]byte{}, r.Full...), v...)
			}
			check := func(host, info []byte) error { return CheckNameInfo(info) }
			if err := EachName(v, check, func(string) error { return nil }); err != nil {
				return fmt.Errorf("full: %w", err)
			}
			r.Full, r.Delta = v, nil
			if r.Full == nil {
				r.Full = []byte{}
			}
		case FieldResponseDelta:
			if r.Delta != nil {
				v = append(append([]byte{}, delta...), v...)
			}
			d, err := UnmarshalDelta(v)
			if err != nil {
				return fmt.Errorf("delta: %w", err)
			}
			r.Full, r.Delta, delta = nil, d, v
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}
