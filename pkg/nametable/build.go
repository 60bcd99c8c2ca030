package nametable

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"
)

// Defaults of Context (Kubernetes DNS defaults).
const (
	DefaultClusterDomain = "cluster.local"
	DefaultTTL           = 30
)

// New builds a table from entries for the pod that pod describes. zones are
// the zones the table is complete for (no trailing dot). It returns an error
// for an entry it cannot serve (a bad name or address) or for two entries
// that define the same name; the caller keeps its previous table.
//
// Everything an A, AAAA or negative answer needs is computed here, once:
// the address records, the SOA of each zone and the empty non-terminals
// (names such as ns.svc.cluster.local that exist only because names below
// them do, RFC 8020), so that Lookup of those only finds and returns
// shared slices. SRV and PTR answers are built by Lookup from the ports
// and a reverse index: precomputed, they were most of the table's memory.
func New(entries []Entry, zones []string, pod Context) (*Table, error) {
	b, err := NewBuilder(zones, pod, len(entries))
	if err != nil {
		return nil, err
	}
	for i := range entries {
		if err := b.Add(&entries[i]); err != nil {
			return nil, err
		}
	}
	return b.Table(), nil
}

// Builder builds a Table from entries added one at a time, so a caller
// converting a big table need not hold every entry at once: New is
// NewBuilder, Add for each entry, then Table. Entries may come in any
// order; where several names share an address, the order of their PTR
// records follows the order they were added in.
type Builder struct {
	b    *builder
	done bool
}

// NewBuilder starts a table for pod with zones (see New); sizeHint is the
// expected number of entries, or 0.
func NewBuilder(zones []string, pod Context, sizeHint int) (*Builder, error) {
	pod, err := normalizeContext(pod)
	if err != nil {
		return nil, err
	}
	b := &builder{
		pod:    pod,
		drafts: make(map[string]*draft, sizeHint*2),
		wild:   make(map[string]*draft),
		soas:   make(map[string]*[]dns.RR),
		rev:    make(map[[16]byte]*draft, sizeHint),
		shapes: make(map[string]*shape),
	}
	if err := b.addZones(zones); err != nil {
		return nil, err
	}
	return &Builder{b: b}, nil
}

// Add validates e and adds its names (see New for the errors). After an
// error the Builder must not be used: the table would lack e.
func (bb *Builder) Add(e *Entry) error {
	if bb.done {
		return errors.New("nametable: Add after Table")
	}
	if err := bb.b.addEntry(e); err != nil {
		return fmt.Errorf("entry %q: %w", e.Hostname, err)
	}
	return nil
}

// Table finishes the table. The Builder must not be used afterwards.
func (bb *Builder) Table() *Table {
	bb.done = true
	b := bb.b
	b.addVersion()
	b.markReverse()
	b.addEmptyNonTerminals()
	return b.table()
}

// normalizeContext lowercases pod, drops trailing dots and fills defaults.
func normalizeContext(pod Context) (Context, error) {
	if pod.ClusterDomain == "" {
		pod.ClusterDomain = DefaultClusterDomain
	}
	d, err := normalizeName(pod.ClusterDomain, false)
	if err != nil {
		return pod, fmt.Errorf("cluster domain %q: %w", pod.ClusterDomain, err)
	}
	pod.ClusterDomain = d
	if pod.Namespace != "" {
		ns, err := normalizeName(pod.Namespace, false)
		if err != nil || strings.Contains(ns, ".") {
			return pod, fmt.Errorf("namespace %q: not a DNS label", pod.Namespace)
		}
		pod.Namespace = ns
	}
	search := make([]string, 0, len(pod.Search))
	for _, s := range pod.Search {
		// resolv.conf is the pod's, not ours: a search domain we cannot
		// use (the root ".", odd characters) is skipped rather than
		// failing every table the agent will ever get.
		n, err := normalizeName(s, false)
		if err != nil {
			continue
		}
		if !slices.Contains(search, n) {
			search = append(search, n)
		}
	}
	pod.Search = search
	if pod.TTL == 0 {
		pod.TTL = DefaultTTL
	}
	if pod.Serial == 0 {
		pod.Serial = 1
	}
	return pod, nil
}

// builder collects drafts; New turns them into a Table.
type builder struct {
	pod    Context
	drafts map[string]*draft // by lowercase name without trailing dot
	wild   map[string]*draft // by wildcard domain ("example.com" for "*.example.com")
	zones  []string          // longest first
	soas   map[string]*[]dns.RR
	// rev maps an address (As16) to the first draft whose name it
	// reverses to; revMore to all of them, in order, each once, for the
	// few addresses that have several.
	rev     map[[16]byte]*draft
	revMore map[[16]byte][]*draft
	// revStored counts the stored names that are also reverse names.
	revStored int
	revOf     map[*node][][16]byte // see Table.revOf
	shapes    map[string]*shape    // see shapeOf
	keyBuf    []byte               // scratch for shapeOf
	// nodes and rrs are slabs the nodes and their record sets are cut
	// from: two allocations for the whole table instead of two per name,
	// and no long-lived objects scattered among the build's garbage.
	nodes  []node
	rrs    []dns.RR
	slabs  slabs
	hasAlt bool
}

func (b *builder) addZones(zones []string) error {
	for _, z := range zones {
		n, err := normalizeName(z, false)
		if err != nil {
			return fmt.Errorf("zone %q: %w", z, err)
		}
		if slices.Contains(b.zones, n) {
			continue
		}
		b.zones = append(b.zones, n)
		b.drafts[n] = &draft{sets: [numSets][]dns.RR{setSOA: *b.soa(n)}, apex: n}
	}
	// Longest first: the first zone containing a name is its closest
	// enclosing zone.
	slices.SortStableFunc(b.zones, func(x, y string) int { return len(y) - len(x) })
	return nil
}

// soa returns the shared SOA set of apex.
func (b *builder) soa(apex string) *[]dns.RR {
	if s, ok := b.soas[apex]; ok {
		return s
	}
	s := &[]dns.RR{soaRR(apex, b.pod.Serial, b.pod.TTL)}
	b.soas[apex] = s
	return s
}

// zoneOf returns the closest authoritative zone containing name, or "".
func (b *builder) zoneOf(name string) string {
	for _, z := range b.zones {
		if inZone(name, z) {
			return z
		}
	}
	return ""
}

// apexFor picks the zone whose SOA a negative answer for name carries: the
// closest authoritative zone, else the cluster domain or the reverse tree
// containing the name, else fallback (the entry's own name). Negative
// answers need some SOA: its MINIMUM is how long resolvers cache them.
func (b *builder) apexFor(name, fallback string) string {
	if z := b.zoneOf(name); z != "" {
		return z
	}
	for _, z := range []string{b.pod.ClusterDomain, "in-addr.arpa", "ip6.arpa"} {
		if inZone(name, z) {
			return z
		}
	}
	return fallback
}

// define stores d under key. A name may be defined once; a draft without
// owner (a zone apex) is merged into the entry's draft.
func (b *builder) define(key string, d *draft) error {
	old, ok := b.drafts[key]
	if ok && old != d {
		if old.owner != "" {
			return fmt.Errorf("name %q already defined by entry %q", key, old.owner)
		}
		d.sets[setSOA] = append(old.sets[setSOA], d.sets[setSOA]...)
	}
	b.drafts[key] = d
	return nil
}

// addPTR adds a to the reverse index with target d (whose canonical name
// the PTR record points at), once per target.
func (b *builder) addPTR(a netip.Addr, d *draft) {
	k := a.As16()
	first, ok := b.rev[k]
	if !ok {
		b.rev[k] = d
		return
	}
	more := b.revMore[k]
	if more == nil {
		if first.canonical == d.canonical {
			return
		}
		if b.revMore == nil {
			b.revMore = make(map[[16]byte][]*draft)
		}
		b.revMore[k] = []*draft{first, d}
		return
	}
	for _, have := range more {
		if have.canonical == d.canonical {
			return
		}
	}
	b.revMore[k] = append(more, d)
}

// markReverse flags the stored names (an entry or zone apex named like a
// reverse name) that are also in the reverse index, so that they answer
// PTR too.
func (b *builder) markReverse() {
	for name, d := range b.drafts {
		if k, ok := parseReverse(name); ok {
			if _, ok := b.rev[k]; ok {
				d.revAddrs = append(d.revAddrs, k)
				b.revStored++
			}
		}
	}
}

// zonesHoldReverse reports whether a zone may contain reverse names, whose
// ancestors are then empty non-terminals.
func (b *builder) zonesHoldReverse() bool {
	for _, z := range b.zones {
		for _, r := range []string{"in-addr.arpa", "ip6.arpa"} {
			if inZone(z, r) || inZone(r, z) {
				return true
			}
		}
	}
	return false
}

// isReverse reports whether name is the reverse name of an indexed address.
func (b *builder) isReverse(name string) bool {
	k, ok := parseReverse(name)
	if !ok {
		return false
	}
	_, ok = b.rev[k]
	return ok
}

// addVersion adds dns-version.<cluster domain> TXT (Kubernetes DNS
// specification section 2.2) unless an entry already defines the name.
func (b *builder) addVersion() {
	key := "dns-version." + b.pod.ClusterDomain
	if _, ok := b.drafts[key]; ok {
		return
	}
	fqdn := key + "."
	b.drafts[key] = &draft{
		canonical: fqdn,
		sets:      [numSets][]dns.RR{setTXT: {txtRR(fqdn, dnsSchemaVersion, versionTTL)}},
		apex:      b.apexFor(key, b.pod.ClusterDomain),
	}
}

// addEmptyNonTerminals defines, inside authoritative zones, every ancestor
// of a defined name that is not defined itself (ns.svc.cluster.local,
// svc.cluster.local, the domain of a wildcard; _tcp.<service> is derived
// at query time, see findPort): such names
// exist and must get NODATA, not NXDOMAIN, or resolvers that trust RFC
// 8020 would treat the whole subtree as gone. Ancestors outside the zones
// stay unknown and are forwarded. One shared node per zone serves all.
func (b *builder) addEmptyNonTerminals() {
	ents := make(map[string]*draft)
	perZone := make(map[string]*draft)
	walk := func(name string, includeSelf bool) {
		z := b.zoneOf(name)
		if z == "" {
			return
		}
		p := name
		if !includeSelf {
			p = parent(name)
		}
		for ; len(p) > len(z); p = parent(p) {
			if _, ok := b.drafts[p]; ok || b.isReverse(p) {
				return // a defined name: its own walk covers what is above it
			}
			if _, ok := ents[p]; ok {
				return
			}
			d, ok := perZone[z]
			if !ok {
				d = &draft{apex: z}
				perZone[z] = d
			}
			ents[p] = d
		}
	}
	for key := range b.drafts {
		walk(key, false)
	}
	if b.zonesHoldReverse() {
		for k := range b.rev {
			walk(revKey(k), false)
		}
	}
	for domain := range b.wild {
		walk(domain, true)
	}
	for k, d := range ents {
		b.drafts[k] = d
	}
}

// table packs the drafts into the immutable Table.
func (b *builder) table() *Table {
	t := &Table{
		pod:   b.pod,
		names: make(map[string]*node, len(b.drafts)),
	}
	b.allocSlabs()
	for k, d := range b.drafts {
		t.names[k] = b.pack(d)
	}
	if len(b.wild) > 0 {
		t.wild = make(map[string]*node, len(b.wild))
		for k, d := range b.wild {
			t.wild[k] = b.pack(d)
		}
	}
	if len(b.rev) > 0 {
		t.rev = make(map[[16]byte]*node, len(b.rev))
		t.revStored = b.revStored
		for k, d := range b.rev {
			t.rev[k] = b.pack(d)
		}
		for k, ds := range b.revMore {
			if t.revMore == nil {
				t.revMore = make(map[[16]byte][]*node, len(b.revMore))
			}
			for _, d := range ds {
				t.revMore[k] = append(t.revMore[k], b.pack(d))
			}
		}
		// The SOA of a reverse name outside every zone (apexFor gives
		// the same answer for all of them; Lookup tries the zones first).
		t.revNs = [2][]dns.RR{
			*b.soa(b.apexFor("in-addr.arpa", "in-addr.arpa")),
			*b.soa(b.apexFor("ip6.arpa", "ip6.arpa")),
		}
	}
	t.revOf = b.revOf // filled by pack
	for _, z := range b.zones {
		t.zones = append(t.zones, zone{name: z, soa: *b.soa(z)})
	}
	// Search-path expansion only under search domains inside a zone the
	// table is complete for: there the expanded name cannot exist
	// elsewhere. Under any other domain (a node's corp.example.com) the
	// name is a real outside host, and answering it with a service would
	// hijack it for every pod that sees a service of the same name.
	for _, s := range b.pod.Search {
		if b.zoneOf(s) != "" {
			t.search = append(t.search, "."+s)
		}
	}
	if b.zoneOf(b.pod.ClusterDomain) != "" {
		t.podZone = "pod." + b.pod.ClusterDomain
	}
	if b.hasAlt {
		svc := ".svc." + b.pod.ClusterDomain
		t.altNs = svc
		t.altSvc = "." + b.pod.ClusterDomain
		if b.pod.Namespace != "" {
			t.altBare = "." + b.pod.Namespace + svc
		}
	}
	return t
}

// allocSlabs sizes b.nodes and b.rrs for every distinct draft (a draft
// may be stored under several names; every reverse index draft is one of
// them).
func (b *builder) allocSlabs() {
	seen := make(map[*draft]struct{}, len(b.drafts))
	nodes, rrs := 0, 0
	count := func(d *draft) {
		if _, ok := seen[d]; ok {
			return
		}
		seen[d] = struct{}{}
		nodes++
		for _, s := range d.sets {
			rrs += len(s)
		}
	}
	for _, d := range b.drafts {
		count(d)
	}
	for _, d := range b.wild {
		count(d)
	}
	b.nodes = make([]node, 0, nodes)
	b.rrs = make([]dns.RR, 0, rrs)
}

// pack turns d into its immutable node, once.
func (b *builder) pack(d *draft) *node {
	if d.built != nil {
		return d.built
	}
	if len(b.nodes) == cap(b.nodes) {
		b.nodes = make([]node, 0, 64) // not counted by allocSlabs; never expected
	}
	b.nodes = append(b.nodes, node{
		canonical: d.canonical,
		shape:     b.shapeOf(d),
		alt:       d.alt,
		rev:       len(d.revAddrs) > 0,
	})
	n := &b.nodes[len(b.nodes)-1]
	d.built = n
	if n.rev {
		// Map order is random; any fixed order will do for the one
		// node in a thousand tables stored under two reverse names.
		slices.SortFunc(d.revAddrs, func(x, y [16]byte) int { return bytes.Compare(x[:], y[:]) })
		if b.revOf == nil {
			b.revOf = make(map[*node][][16]byte)
		}
		b.revOf[n] = d.revAddrs
	}
	if d.chase != "" {
		n.chase = true
		// The CNAME is the node's only record; set() reads every record
		// set of a chase node as empty.
		n.rrs = []dns.RR{&dns.CNAME{Hdr: header(d.canonical, dns.TypeCNAME, d.ttl), Target: d.chase}}
		return n
	}
	lo := len(b.rrs)
	for i, s := range d.sets {
		b.rrs = append(b.rrs, s...)
		if i < len(n.end) {
			n.end[i] = uint32(len(b.rrs) - lo)
		}
	}
	if hi := len(b.rrs); hi > lo {
		n.rrs = b.rrs[lo:hi:hi]
	}
	return n
}

// shapeOf returns the shape of d, shared with every draft of the same
// zone, SRV TTL and ports; a headless service's (SRV targets of its own)
// is not shared.
func (b *builder) shapeOf(d *draft) *shape {
	if d.targets != nil {
		return &shape{ns: *b.soa(d.apex), ttl: d.ttl, ports: d.ports, targets: d.targets, extra: d.extra}
	}
	key := append(b.keyBuf[:0], d.apex...)
	if len(d.ports) > 0 {
		key = binary.AppendUvarint(append(key, 0), uint64(d.ttl))
		for _, p := range d.ports {
			key = append(append(key, byte(len(p.label))), p.label...)
			key = binary.AppendUvarint(key, uint64(p.port))
		}
	}
	b.keyBuf = key
	if sh, ok := b.shapes[string(key)]; ok {
		return sh
	}
	sh := &shape{ns: *b.soa(d.apex), ports: d.ports}
	if len(d.ports) > 0 {
		sh.ttl = d.ttl
	}
	b.shapes[string(key)] = sh
	return sh
}
