package nametable

import (
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

// New builds a table from entries for the pod described by ctx. zones are
// the zones the table is complete for (no trailing dot). It returns an error
// for an entry it cannot serve (a bad name or address) or for two entries
// that define the same name; the caller keeps its previous table.
//
// Everything an answer needs is computed here, once: the records, the SOA
// of each zone, the PTR records of every address and the empty
// non-terminals (names such as ns.svc.cluster.local that exist only
// because names below them do, RFC 8020), so that Lookup only finds and
// returns shared slices.
func New(entries []Entry, zones []string, ctx Context) (*Table, error) {
	ctx, err := normalizeContext(ctx)
	if err != nil {
		return nil, err
	}
	b := &builder{
		ctx:    ctx,
		drafts: make(map[string]*draft, len(entries)*4),
		wild:   make(map[string]*draft),
		soas:   make(map[string]*[]dns.RR),
	}
	if err := b.addZones(zones); err != nil {
		return nil, err
	}
	for i := range entries {
		if err := b.addEntry(&entries[i]); err != nil {
			return nil, fmt.Errorf("entry %q: %w", entries[i].Hostname, err)
		}
	}
	b.addVersion()
	b.addEmptyNonTerminals()
	return b.table(), nil
}

// normalizeContext lowercases ctx, drops trailing dots and fills defaults.
func normalizeContext(ctx Context) (Context, error) {
	if ctx.ClusterDomain == "" {
		ctx.ClusterDomain = DefaultClusterDomain
	}
	d, err := normalizeName(ctx.ClusterDomain, false)
	if err != nil {
		return ctx, fmt.Errorf("cluster domain %q: %w", ctx.ClusterDomain, err)
	}
	ctx.ClusterDomain = d
	if ctx.Namespace != "" {
		ns, err := normalizeName(ctx.Namespace, false)
		if err != nil || strings.Contains(ns, ".") {
			return ctx, fmt.Errorf("namespace %q: not a DNS label", ctx.Namespace)
		}
		ctx.Namespace = ns
	}
	search := make([]string, 0, len(ctx.Search))
	for _, s := range ctx.Search {
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
	ctx.Search = search
	if ctx.TTL == 0 {
		ctx.TTL = DefaultTTL
	}
	if ctx.Serial == 0 {
		ctx.Serial = 1
	}
	return ctx, nil
}

// builder collects drafts; New turns them into a Table.
type builder struct {
	ctx    Context
	drafts map[string]*draft // by lowercase name without trailing dot
	wild   map[string]*draft // by wildcard domain ("example.com" for "*.example.com")
	zones  []string          // longest first
	soas   map[string]*[]dns.RR
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
	s := &[]dns.RR{soaRR(apex, b.ctx.Serial, b.ctx.TTL)}
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
	for _, z := range []string{b.ctx.ClusterDomain, "in-addr.arpa", "ip6.arpa"} {
		if inZone(name, z) {
			return z
		}
	}
	return fallback
}

// define stores d under key. A name may be defined once; a draft without
// owner (a reverse name or a zone apex) is merged into the entry's draft.
func (b *builder) define(key string, d *draft) error {
	old, ok := b.drafts[key]
	if ok && old != d {
		if old.owner != "" {
			return fmt.Errorf("name %q already defined by entry %q", key, old.owner)
		}
		d.sets[setPTR] = append(old.sets[setPTR], d.sets[setPTR]...)
		d.sets[setSOA] = append(old.sets[setSOA], d.sets[setSOA]...)
	}
	b.drafts[key] = d
	return nil
}

// addPTR adds the PTR record a -> target, once per target.
func (b *builder) addPTR(a netip.Addr, target string, ttl uint32) {
	fqdn := reverseName(a)
	key := fqdn[:len(fqdn)-1]
	d, ok := b.drafts[key]
	if !ok {
		d = &draft{canonical: fqdn, apex: b.apexFor(key, key)}
		b.drafts[key] = d
	}
	for _, rr := range d.sets[setPTR] {
		if rr.(*dns.PTR).Ptr == target {
			return
		}
	}
	d.sets[setPTR] = append(d.sets[setPTR], ptrRR(fqdn, target, ttl))
}

// addVersion adds dns-version.<cluster domain> TXT (Kubernetes DNS
// specification section 2.2) unless an entry already defines the name.
func (b *builder) addVersion() {
	key := "dns-version." + b.ctx.ClusterDomain
	if _, ok := b.drafts[key]; ok {
		return
	}
	fqdn := key + "."
	b.drafts[key] = &draft{
		canonical: fqdn,
		sets:      [numSets][]dns.RR{setTXT: {txtRR(fqdn, dnsSchemaVersion, b.ctx.TTL)}},
		apex:      b.apexFor(key, b.ctx.ClusterDomain),
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
			if _, ok := b.drafts[p]; ok {
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
		ctx:   b.ctx,
		names: make(map[string]*node, len(b.drafts)),
	}
	for k, d := range b.drafts {
		t.names[k] = d.pack(b.soa)
	}
	if len(b.wild) > 0 {
		t.wild = make(map[string]*node, len(b.wild))
		for k, d := range b.wild {
			t.wild[k] = d.pack(b.soa)
		}
	}
	for _, z := range b.zones {
		t.zones = append(t.zones, zone{name: z, soa: *b.soa(z)})
	}
	for _, s := range b.ctx.Search {
		t.search = append(t.search, "."+s)
	}
	if b.hasAlt {
		svc := ".svc." + b.ctx.ClusterDomain
		t.altNs = svc
		t.altSvc = "." + b.ctx.ClusterDomain
		if b.ctx.Namespace != "" {
			t.altBare = "." + b.ctx.Namespace + svc
		}
	}
	return t
}
