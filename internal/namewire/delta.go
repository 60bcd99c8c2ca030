package namewire

import "errors"

// The agent keeps the applied table in its wire form (a marshalled
// NameTable) and applies deltas to it there: decoding the base of every
// delta, and the persisted table at every restart, held a second copy of
// the whole table in proto messages (~40 MB at 100,000 names) for a moment,
// on top of the lookup table being built; that moment is the pod's peak.

// RawTable walks a NameTable in wire form: it calls name for every entry
// (the key and its NameInfo still marshalled, both valid during the call
// only) and zone for every authoritative zone, in the order they appear;
// a nil name or zone skips those. It may be walked more than once (a
// table read from a state file is never whole in memory).
type RawTable func(name func(host, info []byte) error, zone func(z string) error) error

// MemTable is the walk of a wire-form NameTable held in memory.
func MemTable(b []byte) RawTable {
	return func(name func(host, info []byte) error, zone func(string) error) error {
		return EachName(b, name, zone)
	}
}

// ApplyDelta returns base (a wire-form NameTable) with d applied, in
// wire form: base's entries that d neither removes nor replaces are copied
// as they are; only the upserted names are marshalled.
func ApplyDelta(base []byte, d *Delta) ([]byte, error) {
	s, err := TableSettings(base)
	if err != nil {
		return nil, err
	}
	p, err := NewDeltaPlan(d, s)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(base)+p.grow)
	err = p.Write(MemTable(base), func(b []byte) error {
		out = append(out, b...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DeltaPlan is a delta ready to be applied to a base table walked name by
// name (in memory or streamed from a state file), with its upserts
// marshalled once.
type DeltaPlan struct {
	drop  map[string]struct{}
	ups   []RawName
	zones []string // the delta's zones, when keepZones is false
	// keepZones: the delta leaves the zones as the base has them.
	keepZones bool
	// settings are the new table's: the delta's, or those of the version
	// it applies to when it carries none (the base walk skips them).
	settings *AgentSettings
	grow     int // bytes the upserts add, about
}

// NewDeltaPlan plans d applied to a base whose settings are base.
func NewDeltaPlan(d *Delta, base *AgentSettings) (*DeltaPlan, error) {
	// The upserts stay the delta's own bytes: nothing is decoded and
	// marshalled again.
	p := &DeltaPlan{drop: make(map[string]struct{}, len(d.Removed)+len(d.Upserted)), ups: d.Upserted, settings: base}
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

// RewritePlan is the plan of an empty delta with settings: it writes a
// table again with its settings first, then its zones, then its names,
// the order a table is built from in one walk.
func RewritePlan(settings *AgentSettings) *DeltaPlan {
	return &DeltaPlan{keepZones: true, settings: settings}
}

// Empty reports whether the delta changes no name or zone.
func (p *DeltaPlan) Empty() bool { return len(p.drop) == 0 && p.keepZones }

// Settings returns the settings of the table the plan writes (the
// caller must not modify them).
func (p *DeltaPlan) Settings() *AgentSettings { return p.settings }

// Write emits the new table, piece by piece (each piece's bytes are valid
// only during the call): the settings first, then the zones (those of the delta, or base's,
// found by a skim of base), then base's kept entries and the upserts. With
// the zones first, a table read back from a state file is built in one
// pass (the builder needs the zones before the first name).
func (p *DeltaPlan) Write(base RawTable, emit func([]byte) error) error {
	zones := p.zones
	if p.keepZones {
		zones = nil
		if err := base(nil, func(z string) error { zones = append(zones, z); return nil }); err != nil {
			return err
		}
	}
	scratch := AppendTableSettings(nil, p.settings)
	if len(scratch) > 0 {
		if err := emit(scratch); err != nil {
			return err
		}
	}
	for _, z := range zones {
		scratch = AppendZone(scratch[:0], z)
		if err := emit(scratch); err != nil {
			return err
		}
	}
	err := base(func(host, info []byte) error {
		if _, ok := p.drop[string(host)]; ok { // no allocation
			return nil
		}
		scratch = AppendEntry(scratch[:0], host, info)
		return emit(scratch)
	}, nil)
	if err != nil {
		return err
	}
	for _, u := range p.ups {
		scratch = AppendEntry(scratch[:0], u.Host, u.Info)
		if err := emit(scratch); err != nil {
			return err
		}
	}
	return nil
}

// Size returns the length of what Write emits.
func (p *DeltaPlan) Size(base RawTable) (int, error) {
	n := 0
	err := p.Write(base, func(b []byte) error {
		n += len(b)
		return nil
	})
	return n, err
}

// ErrNoTable is a file of a StreamNameTableResponse (a state file) that
// holds no full table.
var ErrNoTable = errors.New("holds no table")
