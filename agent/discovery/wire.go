package discovery

import (
	"errors"
	"fmt"
	"slices"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/meshdns/meshdns/internal/hashdiff"
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

// EachName calls name for every entry of the wire-form NameTable b, with the
// entry's key and its NameInfo still marshalled, and zone for every
// authoritative zone, in the order they appear. A nil name or zone skips
// those.
func EachName(b []byte, name func(host string, info []byte) error, zone func(z string) error) error {
	return memRaw(b).wire()(name, zone)
}

// eachRawName is EachName with the keys as the table's bytes (valid during
// the call): the walks that only compare, hash or copy names allocate
// nothing per name.
func eachRawName(b []byte, name func(host, info []byte) error, zone func(z string) error) error {
	return namewire.EachName(b, name, zone)
}

// applyDeltaWire returns base (a wire-form NameTable) with d applied, in
// wire form: base's entries that d neither removes nor replaces are copied
// as they are; only the upserted names are marshalled.
func applyDeltaWire(base []byte, d *namewire.Delta) ([]byte, error) {
	p, err := newDeltaPlan(d)
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
	grow      int // bytes the upserts add, about
}

func newDeltaPlan(d *namewire.Delta) (*deltaPlan, error) {
	// The upserts stay the delta's own bytes: nothing is decoded and
	// marshalled again.
	p := &deltaPlan{drop: make(map[string]struct{}, len(d.Removed)+len(d.Upserted)), ups: d.Upserted}
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

// Change is what a delta changes in the table it applies to (OnWireDelta).
type Change struct {
	// Old walks the entries of the base table that the delta removes or
	// replaces, with their NameInfo as the base has it (marshalled). host
	// and info are valid during the call only.
	Old func(name func(host string, info []byte) error) error
	// New are the names the delta adds or replaces, with their new
	// NameInfo (marshalled, checked to decode).
	New []namewire.RawName
	// ZonesChanged: the delta's zones differ from the base's.
	ZonesChanged bool
	// Names is the number of names of the next table when known (a full
	// table compared with the base), else -1: a patch that does not come
	// to it is wrong.
	Names int
	// Next is set instead of New for a full table that changes more than
	// hashdiff.MaxPatchShare of the base's names (New would hold them all): it
	// walks every name of the next table, with its NameInfo (marshalled,
	// checked to decode), and Old then walks every name of the base, not
	// only those that change: such a change replaces every entry, so
	// that nothing per name (a hash of each) is held while it is applied.
	// host and info are valid during the call only. It and Old may be
	// walked several times: the agent applies such a change in stages.
	Next func(name func(host string, info []byte) error) error
}

// change returns what p changes in base.
func (p *deltaPlan) change(base rawTable) (Change, error) {
	c := Change{
		Old: func(name func(string, []byte) error) error {
			return base(func(host, info []byte) error {
				if _, ok := p.drop[string(host)]; ok { // no allocation
					return name(string(host), info)
				}
				return nil
			}, nil)
		},
		New:   p.ups,
		Names: -1,
	}
	if !p.keepZones {
		var zones []string
		if err := base(nil, func(z string) error { zones = append(zones, z); return nil }); err != nil {
			return c, err
		}
		c.ZonesChanged = !slices.Equal(zones, p.zones)
	}
	return c, nil
}

// diff returns what next changes in base, to apply a full table that
// mostly repeats the one served (a reconnect to a control plane that does
// not know our version) as a patch, or one that changes more than
// hashdiff.MaxPatchShare of the names in stages (Change.Next). ok is false
// when the zones differ. It holds two 64-bit hashes per name of base
// meanwhile (internal/hashdiff), not the tables; a collision makes the
// patch come to another number of names than next has (Names), and the
// agent then builds next whole.
func diff(base, next rawTable) (c Change, ok bool, err error) {
	// Sized once, by a walk of base that only counts (it decodes
	// nothing): grown by appends, the hashes would take up to twice
	// their size while they grow, at the start of a replacement.
	n := 0
	if err := base(func(_, _ []byte) error { n++; return nil }, nil); err != nil {
		return c, false, err
	}
	old := hashdiff.New(n)
	var oldZones, newZones []string
	err = base(func(host, info []byte) error {
		old.Add(host, info)
		return nil
	}, func(z string) error {
		oldZones = append(oldZones, z)
		return nil
	})
	if err != nil {
		return c, false, err
	}
	old.Seal()
	// Compared first, collected after: a change too large for a patch
	// would otherwise hold a quarter of the names (a copy of each) before
	// it is known to be one, beside the hashes.
	changed := 0
	err = next(func(host, info []byte) error {
		c.Names++
		if old.Match(host, info) {
			return nil // unchanged: neither removed nor added
		}
		if err := namewire.CheckNameInfo(info); err != nil {
			return fmt.Errorf("name %q: %w", host, err)
		}
		changed++
		return nil
	}, func(z string) error {
		newZones = append(newZones, z)
		return nil
	})
	if err != nil {
		return Change{}, false, err
	}
	if !slices.Equal(oldZones, newZones) {
		return Change{}, false, nil
	}
	if !old.Small(changed) {
		// Applied in stages, which replace every entry: the walks are
		// of the two tables whole, and the hashes are let go before
		// the stages begin.
		c.Next = func(name func(string, []byte) error) error {
			return next(func(host, info []byte) error { return name(bytesView(host), info) }, nil)
		}
		c.Old = func(name func(string, []byte) error) error {
			return base(func(host, info []byte) error { return name(bytesView(host), info) }, nil)
		}
		return c, true, nil
	}
	// What is not the same in base is added or replaced, in the order
	// of next.
	err = next(func(host, info []byte) error {
		if old.Same(host, info) {
			return nil
		}
		// info is valid during the call only (a table read from the
		// state file).
		c.New = append(c.New, namewire.RawName{Host: string(host), Info: slices.Clone(info)})
		return nil
	}, nil)
	if err != nil {
		return Change{}, false, err
	}
	// What was not matched is removed or replaced.
	c.Old = func(name func(string, []byte) error) error {
		return base(func(host, info []byte) error {
			if old.Changed(host) {
				return name(bytesView(host), info)
			}
			return nil
		}, nil)
	}
	return c, true, nil
}

// bytesView is b as a string, valid while b is: the walks of a large
// change hand every name over once per stage, and a string each was most
// of their garbage.
func bytesView(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// empty reports whether the delta changes nothing.
func (p *deltaPlan) empty() bool { return len(p.drop) == 0 && p.keepZones }

// write emits the new table, piece by piece (each piece's bytes are valid
// only during the call): the zones first (those of the delta, or base's,
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
	var scratch []byte
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
