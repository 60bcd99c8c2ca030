package discovery

import (
	"errors"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshdns/meshdns/internal/namewire"
)

// The client keeps the applied table in its wire form (a marshalled
// NameTable) and applies deltas to it there: decoding the base of every
// delta, and the persisted table at every restart, held a second copy of
// the whole table in proto messages (~40 MB at 100,000 names) for a moment,
// on top of the lookup table being built; that moment is the pod's peak.

// Field numbers of meshdns.v1 messages read here without decoding them.
const (
	fieldNameTableTable = 1                             // map<string, NameInfo> table
	fieldNameTableZones = 2                             // repeated string authoritative_zones
	fieldResponseVer    = namewire.FieldResponseVersion // StreamNameTableResponse.version_info
	fieldResponseNonce  = namewire.FieldResponseNonce   // StreamNameTableResponse.nonce
	fieldResponseFull   = namewire.FieldResponseFull    // StreamNameTableResponse.full
	fieldResponseDelta  = namewire.FieldResponseDelta   // StreamNameTableResponse.delta
)

// applyDeltaWire returns base (a wire-form NameTable) with d applied, in
// wire form: base's entries that d neither removes nor replaces are copied
// as they are; only the upserted names are marshalled.
func applyDeltaWire(base []byte, d *namewire.Delta) ([]byte, error) {
	s, err := namewire.TableSettings(base)
	if err != nil {
		return nil, err
	}
	p, err := newDeltaPlan(d, s)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(base)+p.grow)
	err = p.write(memRaw(base), func(b []byte) error {
		out = append(out, b...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// deltaPlan is a delta ready to be applied to a base table walked name by
// name (in memory or streamed from the state file), with its upserts
// marshalled once.
type deltaPlan struct {
	drop  map[string]struct{}
	ups   []namewire.RawName
	zones []string // the delta's zones, when keepZones is false
	// keepZones: the delta leaves the zones as the base has them.
	keepZones bool
	// settings are the new table's: the delta's, or those of the version
	// it applies to when it carries none (the base walk skips them).
	settings *namewire.AgentSettings
	grow     int // bytes the upserts add, about
}

// newDeltaPlan plans d applied to a base whose settings are base.
func newDeltaPlan(d *namewire.Delta, base *namewire.AgentSettings) (*deltaPlan, error) {
	// The upserts stay the delta's own bytes: nothing is decoded and
	// marshalled again.
	p := &deltaPlan{drop: make(map[string]struct{}, len(d.Removed)+len(d.Upserted)), ups: d.Upserted, settings: base}
	if d.Settings != nil {
		p.settings = d.Settings // present: replaces them whole
	}
	for _, k := range d.Removed {
		p.drop[k] = struct{}{}
	}
	for _, u := range d.Upserted {
		p.drop[u.Host] = struct{}{}
		p.grow += len(u.Host) + len(u.Info) + 8
	}
	if z := d.AuthoritativeZones; z != nil {
		p.zones = z.Zones
	} else {
		p.keepZones = true
	}
	return p, nil
}

// empty reports whether the delta changes no name or zone.
func (p *deltaPlan) empty() bool { return len(p.drop) == 0 && p.keepZones }

// write emits the new table, piece by piece (each piece's bytes are valid
// only during the call): the settings first, then the zones (those of the delta, or base's,
// found by a skim of base), then base's kept entries and the upserts. With
// the zones first, a table read back from the state dir is built in one
// pass (the builder needs the zones before the first name).
func (p *deltaPlan) write(base rawTable, emit func([]byte) error) error {
	zones := p.zones
	if p.keepZones {
		zones = nil
		if err := base(nil, func(z string) error { zones = append(zones, z); return nil }); err != nil {
			return err
		}
	}
	scratch := namewire.AppendTableSettings(nil, p.settings)
	if len(scratch) > 0 {
		if err := emit(scratch); err != nil {
			return err
		}
	}
	for _, z := range zones {
		scratch = namewire.AppendZone(scratch[:0], z)
		if err := emit(scratch); err != nil {
			return err
		}
	}
	err := base(func(host, info []byte) error {
		if _, ok := p.drop[string(host)]; ok { // no allocation
			return nil
		}
		scratch = namewire.AppendEntry(scratch[:0], host, info)
		return emit(scratch)
	}, nil)
	if err != nil {
		return err
	}
	for _, u := range p.ups {
		scratch = namewire.AppendEntry(scratch[:0], u.Host, u.Info)
		if err := emit(scratch); err != nil {
			return err
		}
	}
	return nil
}

// size returns the length of what write emits.
func (p *deltaPlan) size(base rawTable) (int, error) {
	n := 0
	err := p.write(base, func(b []byte) error {
		n += len(b)
		return nil
	})
	return n, err
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
