package view

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// Version is one immutable table of one view.
type Version struct {
	// ID is a hash of the table's content: equal tables have equal IDs in
	// every replica and after restarts, so an agent that fails over to
	// another replica with the same content resumes without a transfer.
	ID string
	// Seq is the registry model version the table was built from.
	Seq uint64
	// names maps the table's hostnames to their entries.
	names names
	// Zones the table is complete for, sorted.
	Zones []string
	// Published is when the version was built; push latency counts from it.
	Published time.Time
	// Changed is the model's earliest source change, zero if unknown.
	Changed time.Time

	sum uint64 // sum of the per-name hashes, for update

	enc *encoder // shared with the view, counts marshals

	fullOnce sync.Once
	full     *Prepared

	// last is the delta encoded last: the one every agent of the view
	// asks for after a change, read without the lock.
	last atomic.Pointer[Prepared]

	mu     sync.Mutex           // guards deltas
	deltas map[string]*Prepared // by base version ID
}

// Prepared is an encoded StreamNameTableResponse without its nonce. Its
// bytes are shared by every agent that gets it and must not be modified.
type Prepared struct {
	Version *Version
	// Kind is "full" or "delta".
	Kind string
	// Base is the version a delta applies to; empty for a full table.
	Base  string
	Bytes []byte
	// Upserted and Removed count the names a delta carries.
	Upserted, Removed int
}

// build makes the version a view of key sees in m, from scratch.
func build(m *registry.Model, key Key, localDomain string, now time.Time) *Version {
	v := &Version{
		Seq:       m.Version,
		Published: now,
		Changed:   m.Changed,
		Zones:     viewZones(m.Zones, key, localDomain),
	}
	all := make(map[string]*registry.Candidate, len(m.Names))
	rewrite := key.ClusterDomain != "" && key.ClusterDomain != localDomain
	for host, cs := range m.Names {
		c := visible(cs, key.Namespace)
		if c == nil {
			continue
		}
		if rewrite {
			host = rewriteDomain(host, localDomain, key.ClusterDomain)
		}
		all[host] = c
		v.sum += entryHash(host, c.Hash)
	}
	v.names = namesOf(all)
	v.ID = versionID(v.sum, v.Zones)
	return v
}

// update makes the version that follows cur for m, where cur reflects the
// model just before m: it looks only at the names m touched, so a
// one-name change costs a small overlay (names), not 10,000 visibility
// checks, hashes and a map copy. It returns a nil version when nothing this view sees changed,
// and otherwise the entries the changed names had in cur (nil: absent).
func update(cur *Version, m *registry.Model, key Key, localDomain string, now time.Time) (*Version, map[string]*registry.Candidate) {
	zones := viewZones(m.Zones, key, localDomain)
	rewrite := key.ClusterDomain != "" && key.ClusterDomain != localDomain
	before := map[string]*registry.Candidate{}
	var news []*registry.Candidate
	var keys []string
	for host := range m.Touched {
		c := visible(m.Names[host], key.Namespace)
		k := host
		if rewrite {
			k = rewriteDomain(host, localDomain, key.ClusterDomain)
		}
		if o := cur.names.get(k); o != c {
			before[k] = o
			keys = append(keys, k)
			news = append(news, c)
		}
	}
	if len(before) == 0 && slices.Equal(zones, cur.Zones) {
		return nil, nil
	}
	nv := &Version{Seq: m.Version, Zones: zones, Published: now, Changed: m.Changed, sum: cur.sum}
	changes := make(map[string]*registry.Candidate, len(keys))
	for i, k := range keys {
		if o := before[k]; o != nil {
			nv.sum -= entryHash(k, o.Hash)
		}
		c := news[i]
		if c != nil {
			nv.sum += entryHash(k, c.Hash)
		}
		changes[k] = c
	}
	nv.names = cur.names.with(changes)
	nv.ID = versionID(nv.sum, zones)
	return nv, before
}

// visible returns the first candidate a pod in ns may see, or nil.
func visible(cs []*registry.Candidate, ns string) *registry.Candidate {
	for _, c := range cs {
		if c.VisibleTo(ns) {
			return c
		}
	}
	return nil
}

func viewZones(zones []string, key Key, localDomain string) []string {
	zs := slices.Clone(zones)
	if key.ClusterDomain != "" && key.ClusterDomain != localDomain {
		for i, z := range zs {
			zs[i] = rewriteDomain(z, localDomain, key.ClusterDomain)
		}
		sort.Strings(zs)
		zs = slices.Compact(zs)
	}
	return zs
}

// versionID is the content hash of a table: the sum of its per-name hashes
// (independent of map order, so no sort of 10,000 names, and updatable
// name by name) mixed with a hash of its zones.
func versionID(sum uint64, zones []string) string {
	h := fnv.New64a()
	for _, z := range zones {
		h.Write([]byte(z))
		h.Write([]byte{0})
	}
	return fmt.Sprintf("%016x", sum^h.Sum64())
}

// rewriteDomain moves a name in the control plane's cluster domain into
// the agent's, so an agent configured with another cluster domain sees its
// services under the domain its pods search.
func rewriteDomain(name, from, to string) string {
	if name == from {
		return to
	}
	if strings.HasSuffix(name, "."+from) {
		return name[:len(name)-len(from)] + to
	}
	return name
}

func entryHash(host string, c uint64) uint64 {
	h := fnv.New64a()
	h.Write([]byte(host))
	var b [9]byte
	binary.LittleEndian.PutUint64(b[1:], c)
	h.Write(b[:])
	return h.Sum64()
}

// Full returns the version as a full table, encoding it on first use.
func (v *Version) Full() *Prepared {
	v.fullOnce.Do(func() {
		keys := v.sortedNames()
		var body []byte
		for _, k := range keys {
			body = namewire.AppendEntry(body, k, v.names.get(k).Bytes)
		}
		for _, z := range v.Zones {
			body = namewire.AppendZone(body, z)
		}
		b := make([]byte, 0, len(body)+len(v.ID)+16)
		b = namewire.AppendFullResponse(b, v.ID, body)
		v.full = &Prepared{Version: v, Kind: "full", Bytes: b, Upserted: len(keys)}
		v.enc.marshalled("full", len(b))
	})
	return v.full
}

func (v *Version) cachedDelta(base string) *Prepared {
	if p := v.last.Load(); p != nil && p.Base == base {
		return p
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.deltas[base]
}

// DeltaFrom returns the delta that turns version base into v, encoding it
// once per base. baseOf holds, for every name that differs between base
// and v, its entry in base (nil: absent); baseZones are base's zones. A
// name whose entry is the same in both is skipped, so baseOf may hold more
// names than changed. base may be v itself with a nil baseOf: an empty
// delta tells a resuming agent that it is current.
func (v *Version) DeltaFrom(base string, baseOf map[string]*registry.Candidate, baseZones []string) *Prepared {
	v.mu.Lock()
	defer v.mu.Unlock()
	if p, ok := v.deltas[base]; ok {
		return p
	}
	var up, rm []string
	for k, o := range baseOf {
		c := v.names.get(k)
		ok := c != nil
		switch {
		case !ok && o != nil:
			rm = append(rm, k)
		case ok && (o == nil || (o != c && !bytes.Equal(o.Bytes, c.Bytes))):
			up = append(up, k)
		}
	}
	sort.Strings(up)
	sort.Strings(rm)
	var body []byte
	body = namewire.AppendDeltaBase(body, base)
	for _, k := range up {
		body = namewire.AppendDeltaUpserted(body, k, v.names.get(k).Bytes)
	}
	for _, k := range rm {
		body = namewire.AppendDeltaRemoved(body, k)
	}
	if !slices.Equal(baseZones, v.Zones) {
		body = namewire.AppendDeltaZones(body, v.Zones)
	}
	b := make([]byte, 0, len(body)+len(v.ID)+16)
	b = namewire.AppendDeltaResponse(b, v.ID, body)
	p := &Prepared{Version: v, Kind: "delta", Base: base, Bytes: b, Upserted: len(up), Removed: len(rm)}
	if v.deltas == nil {
		v.deltas = map[string]*Prepared{}
	}
	v.deltas[base] = p
	v.last.Store(p)
	v.enc.marshalled("delta", len(b))
	return p
}

// Table returns the version as a NameTable message, for debug output.
func (v *Version) Table() *meshdnsv1.NameTable {
	t := &meshdnsv1.NameTable{Table: make(map[string]*meshdnsv1.NameInfo, v.names.len()), AuthoritativeZones: slices.Clone(v.Zones)}
	v.names.each(func(k string, c *registry.Candidate) { t.Table[k] = c.Info })
	return t
}

func (v *Version) sortedNames() []string {
	keys := make([]string, 0, v.names.len())
	v.names.each(func(k string, _ *registry.Candidate) { keys = append(keys, k) })
	sort.Strings(keys)
	return keys
}

// Names returns the version's hostnames and their entries (a copy).
func (v *Version) Names() map[string]*registry.Candidate { return v.names.toMap() }

// Len returns how many names the version has.
func (v *Version) Len() int { return v.names.len() }
