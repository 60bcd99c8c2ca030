package namewire

import (
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// Append appends r marshalled, as the generated code writes it.
func (r *Request) Append(b []byte) []byte {
	if id := r.Identity; id != nil {
		b = appendMessage(b, fieldRequestIdentity, func(b []byte) []byte {
			b = appendString(b, fieldIdentityPod, id.PodName)
			b = appendString(b, fieldIdentityNamespace, id.Namespace)
			b = appendString(b, fieldIdentityDomain, id.ClusterDomain)
			b = appendString(b, fieldIdentityInstance, id.InstanceID)
			b = appendString(b, fieldIdentityVersion, id.AgentVersion)
			return appendStrings(b, fieldIdentityFeatures, id.Features)
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
	if f := r.Failing; f != nil {
		b = appendMessage(b, fieldRequestFailing, func(b []byte) []byte {
			b = appendVarint(b, fieldFailingWindow, uint64(f.WindowSeconds))
			for i := range f.Names {
				n := &f.Names[i]
				b = appendMessage(b, fieldFailingNames, func(b []byte) []byte {
					b = appendString(b, fieldFailingName, n.Name)
					b = appendVarint(b, fieldFailingRcode, uint64(n.Rcode))
					return appendVarint(b, fieldFailingCount, n.Count)
				})
			}
			return b
		})
	}
	return appendString(b, fieldRequestRejected, r.RejectedVersion)
}

// UnmarshalDelta decodes a marshalled NameTableDelta. The upserted
// NameInfos stay in wire form (sub-slices of b, or copies where proto
// would merge several values of one entry), each checked to decode. The
// settings are decoded strictly (AgentSettings.Unmarshal): a field the
// agent does not know there fails the whole delta.
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
		case fieldDeltaSettings:
			if d.Settings == nil {
				d.Settings = new(AgentSettings)
			}
			// Merged, as proto merges a repeated embedded message.
			return d.Settings.merge(v)
		}
		return nil
	})
	if err == nil && d.Settings != nil {
		err = d.Settings.check()
	}
	if err != nil {
		return nil, err
	}
	return d, nil
}
