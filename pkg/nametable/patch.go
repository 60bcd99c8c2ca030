package nametable

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// Patch updates a table in place of a rebuild: a replacement that builds a
// whole second table while the first one serves holds both at once, so
// its peak is a table above the steady heap. The table Patch returns
// shares the old one's storage instead: nodes, records and names live in
// chunks that are written once and never moved (internal/arena), so the new
// table appends what it adds and copies only the parts it changes in
// place: the name index (about 5 bytes a name), the reverse index (4
// bytes an address) and the side maps. Readers of the old table are never
// raced: nothing either table reads is written again.
//
// The names that removed entries leave behind stay in the shared chunks
// as garbage; Table.Garbage says how much, so that the caller rebuilds
// with New once it is worth it.

var errNotFromNew = errors.New("patch: the table was not built by New or a Builder")

// Patch returns a table that answers exactly as New would for the entries
// of t without remove and with add (in that order: added names follow the
// old ones where several names share an address), for the same zones and
// Context. remove holds the entries going away as they were given to New
// (or to an earlier Patch); an update is the old entry in remove and the
// new one in add. t is not changed and stays usable: it may serve while
// Patch runs, and after it.
//
// Patch returns an error, and no table, for an entry of add New would
// refuse (see New), a name defined twice, or an entry of remove whose
// names are not in t as that entry defined them.
//
// The zones and the Context cannot change in a patch: when they do, build
// a new table with New.
func (t *Table) Patch(remove, add []Entry) (*Table, error) {
	return t.PatchFrom(entrySlice(remove), entrySlice(add), addedNames(add))
}

// Entries hands entries over one at a time: it calls each with every
// entry in turn and returns the first error each returns, or its own (a
// failed conversion, say). The entry is read during the call only, so a
// caller converting entries as it reads them may reuse one.
type Entries func(each func(*Entry) error) error

func entrySlice(s []Entry) Entries {
	return func(each func(*Entry) error) error {
		for i := range s {
			if err := each(&s[i]); err != nil {
				return err
			}
		}
		return nil
	}
}

// PatchFrom is Patch with the entries handed over one at a time, so that a
// caller applying a large change converts each entry as the patch reads
// it rather than holding them all (a converted entry weighs more than the
// name does in the table). remove is read whole before add; nil reads
// none. addNames is about how many names add defines (to size the name
// index once; 0 if unknown).
func (t *Table) PatchFrom(remove, add Entries, addNames int) (*Table, error) {
	if t == nil || !t.st.Started() {
		return nil, errNotFromNew
	}
	// Only the last table patched may append to the tails of the chunks
	// it shares; a patch of any other starts chunks of its own, so two
	// tables patched from one never write the same bytes.
	tip := t.st.Claim()
	nt, err := t.patch(remove, add, addNames, tip)
	if tip {
		if err != nil {
			t.st.Release(&t.st)
		} else {
			t.st.Release(&nt.st)
		}
	}
	return nt, err
}

// Garbage is the share of the node slots the table still holds that no
// name uses any more: the names that Patch removed (with their records
// and names in the shared storage) and the unused chunk tails a Patch of a
// table other than the last one patched leaves behind, in the chunks some
// live name still shares (the chunks no name uses are dropped, see
// internal/arena/live.go). 0 for a table from New; a caller that patches tables
// rebuilds with New when it passes a share it chooses (a quarter, say).
func (t *Table) Garbage() float64 {
	if t == nil || t.st.Next() == 0 {
		return 0
	}
	held := t.st.HeldNodes()
	if held <= 0 {
		return 0
	}
	live := t.st.Len() + len(t.wild)
	return max(0, 1-float64(live)/float64(held))
}

// patcher holds what one Patch collects.
type patcher struct {
	old, nt *Table
	b       *builder
	// touched are the stored names removed or added (their bytes in the
	// table's chunks), wilds the wildcard domains, addrs the addresses
	// whose records left or joined the reverse index: the names whose
	// being defined may have changed, which the empty non-terminals
	// depend on (patchents.go).
	touched map[string]struct{}
	wilds   map[string]struct{}
	addrs   [][16]byte // sorted, unique once mergeReverse is done
	// dropped are the records of removed names.
	dropped map[uint32]struct{}
	// added are the stored names the patch added (entries, apexes given
	// back, dns-version), placed those added by entries.
	added  []string
	placed []string
}

func (t *Table) patch(remove, add Entries, addNames int, tip bool) (*Table, error) {
	nt := t.fork(tip, addNames)
	p := &patcher{
		old: t, nt: nt,
		touched: make(map[string]struct{}, 2*addNames),
		wilds:   make(map[string]struct{}),
		dropped: make(map[uint32]struct{}, addNames),
	}
	p.b = t.patchBuilder(nt, &p.placed)
	b := p.b

	var apexes []string
	if remove == nil {
		remove = entrySlice(nil)
	}
	if add == nil {
		add = entrySlice(nil)
	}
	err := remove(func(e *Entry) error {
		gone, err := p.remove(e)
		if err != nil {
			return fmt.Errorf("remove entry %q: %w", e.Hostname, err)
		}
		apexes = append(apexes, gone...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	// A zone apex an entry had taken over is the zone's own again, as
	// New would have it before the entries come (and may be taken over
	// by an added entry of the same name).
	for _, z := range apexes {
		if nt.st.Lookup(stringBytes(z)) != nil {
			continue
		}
		if err := b.addApex(z); err != nil {
			return nil, err
		}
		p.added = append(p.added, z)
	}
	err = add(func(e *Entry) error {
		if err := b.addEntry(e); err != nil {
			return fmt.Errorf("entry %q: %w", e.Hostname, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, name := range p.placed {
		if w, ok := strings.CutPrefix(name, "*."); ok {
			p.wilds[w] = struct{}{}
			continue
		}
		p.touched[name] = struct{}{}
		p.added = append(p.added, name)
	}
	for _, z := range apexes {
		p.touched[z] = struct{}{}
	}

	p.mergeReverse()
	version := "dns-version." + b.pod.ClusterDomain
	if nt.st.Lookup(stringBytes(version)) == nil {
		b.addVersion()
		p.touched[version] = struct{}{}
		p.added = append(p.added, version)
	}
	if err := p.markReverse(); err != nil {
		return nil, err
	}
	if err := p.emptyNonTerminals(); err != nil {
		return nil, err
	}
	b.setRevNs()
	if nt.altNs == "" {
		b.setAlt()
	}
	nt.st.Compact()
	nt.st.Reclaim()
	return nt, nil
}

// fork returns a copy of t that shares its storage and owns copies of
// what a patch changes in place (arena.Store.Fork, and the side maps).
// With tip, the copy appends to the tails of t's last chunks; else it
// starts chunks of its own. extra is how many names the patch may add, to
// size the name index once.
func (t *Table) fork(tip bool, extra int) *Table {
	nt := *t
	var wilds []*node
	for _, n := range t.wild {
		wilds = append(wilds, n)
	}
	nt.st = t.st.Fork(tip, extra, wilds)
	nt.shapes = slices.Clone(t.shapes) // a patch drops headless services' shapes
	nt.freeShapes = slices.Clone(t.freeShapes)
	nt.wild = maps.Clone(t.wild)
	nt.canonOf = maps.Clone(t.canonOf)
	nt.bigShape = maps.Clone(t.bigShape)
	nt.desc = nil
	return &nt
}

// addedNames is about how many names add defines, at most.
func addedNames(add []Entry) int {
	n := 8 // dns-version, apexes, empty non-terminals
	for i := range add {
		eps := 0
		for _, ep := range add[i].Endpoints {
			eps += max(1, len(ep.IPs))
		}
		n += (1 + len(add[i].AltHosts)) * (1 + eps)
	}
	return n
}

// maxSeedShapes bounds the shapes a patch indexes to share them with the
// nodes it adds: past it (a table whose services all differ in ports) new
// nodes get shapes of their own rather than the patch costing a map of
// every shape.
const maxSeedShapes = 4096

// patchBuilder returns a builder that adds entries to nt, sharing t's SOA
// records and shapes.
func (t *Table) patchBuilder(nt *Table, placed *[]string) *builder {
	b := &builder{
		t:      nt,
		pod:    t.pod,
		zones:  t.Zones(),
		soas:   make(map[string]*[]dns.RR),
		shapes: make(map[string]int),
		owners: make(map[*node]string),
		placed: placed,
	}
	for i := range t.zones {
		b.soas[t.zones[i].name] = &t.zones[i].soa
	}
	if len(t.shapes) <= maxSeedShapes {
		for i, sh := range t.shapes {
			if sh == nil || len(sh.ns) == 0 {
				continue
			}
			apex := strings.TrimSuffix(sh.ns[0].Header().Name, ".")
			if _, ok := b.soas[apex]; !ok {
				b.soas[apex] = &sh.ns
			}
			if sh.targets == nil {
				b.shapes[string(appendShapeKey(nil, apex, sh.ttl, sh.ports))] = i
			}
		}
	}
	return b
}

// track notes that the builder stored n, for Patch.
func (b *builder) track(n *node) {
	if b.placed != nil {
		*b.placed = append(*b.placed, b.t.st.Key(n.Name))
	}
}

// remove takes the names of e out of the new table and returns the zone
// apexes among them.
func (p *patcher) remove(e *Entry) (apexes []string, err error) {
	groups, err := definedNames(e)
	if err != nil {
		return nil, err
	}
	for _, g := range groups {
		for _, name := range g {
			key, err := p.drop(name, g[0])
			if err != nil {
				return nil, err
			}
			if key != "" && p.nt.isZone(key) {
				apexes = append(apexes, key)
			}
		}
	}
	return apexes, nil
}

// drop removes name, whose canonical name must be canonical, and returns
// its stored form ("" for a wildcard).
func (p *patcher) drop(name, canonical string) (string, error) {
	nt := p.nt
	notHere := func() error { return fmt.Errorf("name %q is not in the table", name) }
	if w, ok := strings.CutPrefix(name, "*."); ok {
		n := nt.wild[w]
		if n == nil || !nt.hasCanonical(n, canonical) {
			return "", notHere()
		}
		if id, ok := nt.st.IDOf(n); ok {
			nt.st.Ref(id, -1)
		}
		delete(nt.wild, w)
		p.wilds[w] = struct{}{}
		return "", nil
	}
	i, ok := nt.st.Find(name)
	if !ok {
		return "", notHere()
	}
	n := nt.st.Node(nt.st.At(i))
	if n.is(flagNoCanon) || n.isVersion() || !nt.hasCanonical(n, canonical) {
		return "", notHere()
	}
	key := nt.st.Key(n.Name)
	p.touched[key] = struct{}{}
	if !n.is(flagChase) {
		for r := n.RR; r < n.RR+uint32(n.nA)+uint32(n.nAAAA); r++ {
			p.dropped[r] = struct{}{}
		}
	}
	if n.is(flagCopy) {
		delete(nt.canonOf, n)
	}
	if n.shape == bigShape {
		delete(nt.bigShape, n)
	} else if sh := nt.shapes[n.shape]; sh != nil && sh.targets != nil {
		// A headless service's shape is its own (shapeFor): it goes
		// with it, and its endpoint records with it.
		nt.shapes[n.shape] = nil
		nt.freeShapes = append(nt.freeShapes, int(n.shape))
	}
	nt.st.Delete(i)
	return key, nil
}

// hasCanonical reports whether n's canonical name is name (no trailing dot).
func (t *Table) hasCanonical(n *node, name string) bool {
	c := t.canonical(n)
	return len(c) == len(name)+1 && c[:len(name)] == name
}

// isZone reports whether name is a zone apex.
func (t *Table) isZone(name string) bool {
	for i := range t.zones {
		if t.zones[i].name == name {
			return true
		}
	}
	return false
}

// definedNames returns the stored names and wildcards e defines, grouped
// as addEntry places them: first its hostname and alt hosts, then per
// endpoint its name under the hostname and under each alt host that is
// not a wildcard. The first name of a group is the canonical name of the
// others. A headless service without endpoints defines none.
func definedNames(e *Entry) ([][]string, error) {
	host, err := normalizeName(e.Hostname, true)
	if err != nil {
		return nil, err
	}
	names := []string{host}
	for _, a := range e.AltHosts {
		n, err := normalizeName(a, true)
		if err != nil {
			return nil, fmt.Errorf("alt host %q: %w", a, err)
		}
		if !slices.Contains(names, n) {
			names = append(names, n)
		}
	}
	if strings.HasPrefix(host, "*.") || e.CanonicalName != "" {
		return [][]string{names}, nil
	}
	ips, err := uniqueAddrs(e.IPs)
	if err != nil {
		return nil, err
	}
	eps, err := endpointNames(nil, e.Endpoints, "")
	if err != nil {
		return nil, err
	}
	if len(ips) == 0 && len(eps) == 0 {
		return nil, nil
	}
	groups := [][]string{names}
	for _, ep := range eps {
		g := []string{ep.label + "." + host}
		for _, a := range names[1:] {
			if !strings.HasPrefix(a, "*.") {
				g = append(g, ep.label+"."+a)
			}
		}
		groups = append(groups, g)
	}
	return groups, nil
}
