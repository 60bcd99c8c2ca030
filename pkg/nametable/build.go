package nametable

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/nametable/internal/arena"
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
	t := &Table{pod: pod, st: arena.New[node, dns.RR](sizeHint)}
	b := &builder{
		t:      t,
		pod:    pod,
		soas:   make(map[string]*[]dns.RR),
		shapes: make(map[string]int),
		owners: make(map[*node]string),
		// Most entries have an address or endpoints: the reverse
		// records, grown from nothing, were copied a dozen times.
		pend4: make([]pending4, 0, min(max(sizeHint, 0), arena.MaxNodes)),
		walk:  &entWalk{ents: make(map[string]string)},
		hint:  max(sizeHint, 0),
	}
	if sizeHint > probeEntries {
		b.probe = max(probeEntries, sizeHint/32)
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
	b := bb.b
	if b.added++; b.added == b.probe {
		// The names per entry so far say how many names the table
		// will hold: the index grows now, while a rehash is cheap,
		// rather than past a hundred thousand names; at most twice
		// the hint, should the first entries be unlike the others.
		b.t.st.GrowFor(min(b.expectNames(), 2*b.hint))
	}
	return nil
}

// Table finishes the table. The Builder must not be used afterwards.
func (bb *Builder) Table() *Table {
	bb.done = true
	b := bb.b
	b.finish()
	b.t.st.Start()
	return b.t
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

// builder writes the table as entries are added: nodes, records and names
// go straight into the table's chunks (internal/arena), so that building
// a table costs little beyond the finished table.
type builder struct {
	t     *Table
	pod   Context
	zones []string // longest first
	soas  map[string]*[]dns.RR
	// shapes indexes Table.shapes by shapeOf's key; recent are the last
	// shapes shapeFor returned, nextRecent the one to replace next.
	shapes     map[string]int
	recent     [4]recentShape
	nextRecent int
	keyBuf     []byte // scratch for shapeOf
	// owners is the entry that defined a node not named after it (an
	// endpoint name, an alt host), to report a name defined twice.
	owners map[*node]string
	// ofParent has a bit per node ID: the entry that defined the node is
	// named after its parent (the node of a service's endpoint).
	ofParent []uint64
	// placed collects the stored names added, for Patch; nil in New.
	placed *[]string
	// walk notes what New finds out about the stored names (ents.go);
	// nil in Patch.
	walk *entWalk
	// hint is the number of entries expected (NewBuilder), 0 if unknown;
	// added the entries added so far; probe the entry after which the
	// index is sized for the names expected (0: never).
	hint, added, probe int
	slabs              slabs
	hasAlt             bool
	// tlds caches isTLD per label (public.go), or nil; nsForms is the
	// flagPublicNS of each namespace as entries spell it, or nil.
	tlds    map[string]bool
	nsForms map[string]uint8
	// pend4 and pend6 collect the reverse index (finishReverse).
	pend4 []pending4
	pend6 []pending6
	// Scratch for the record sets of the nodes being added: an entry's
	// own addresses, an endpoint's, and a headless service's (all its
	// endpoints').
	bufA, bufAAAA, epA, epAAAA, hlA, hlAAAA []dns.RR
	// local counts the records of hlA and hlAAAA in the pod's zone.
	local [2]uint16
	ipBuf []netip.Addr // an entry's addresses
	// portBuf is srvPorts' scratch; portLabels its labels by port name
	// and protocol.
	portBuf    []srvPort
	epNames    []endpointName // endpointNames' scratch
	portLabels map[string]*[len(protos)]string
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
	}
	// Longest first: the first zone containing a name is its closest
	// enclosing zone.
	slices.SortStableFunc(b.zones, func(x, y string) int { return len(y) - len(x) })
	// The apexes hold their SOA and have no owner: an entry of the same
	// name takes the SOA over.
	for _, z := range b.zones {
		if err := b.addApex(z); err != nil {
			return err
		}
	}
	return nil
}

// addApex stores the apex of zone z with its SOA.
func (b *builder) addApex(z string) error {
	id, n, err := b.t.st.NewNode()
	if err != nil {
		return err
	}
	ref, _ := b.t.st.PutText("", z)
	soa := *b.soa(z)
	rrs, rr := b.t.st.PutRecords(len(soa))
	copy(rrs, soa)
	*n = node{Head: arena.Head{Name: ref, RR: rr}, tail: uint8(len(soa)), flags: flagNoCanon}
	b.setShape(n, b.shapeFor(z, 0, nil, nil, nil))
	b.t.st.Insert(id)
	b.stored(z, false) // no parent inside its zone
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

// lookup returns the node stored under name, or nil.
func (b *builder) lookup(name string) *node { return b.t.st.Lookup(stringBytes(name)) }

// ownerOf is the hostname of the entry that defined n.
func (b *builder) ownerOf(n *node) string {
	if o, ok := b.owners[n]; ok {
		return o
	}
	key := b.t.st.Key(n.Name)
	if id, ok := b.t.st.IDOf(n); ok && int(id/64) < len(b.ofParent) && b.ofParent[id/64]&(1<<(id%64)) != 0 {
		return parent(key)
	}
	return key
}

// setOwner records that the entry named owner defined node id, n.
func (b *builder) setOwner(id arena.ID, n *node, owner string) {
	key := b.t.st.Key(n.Name)
	switch {
	case owner == key:
	case owner == parent(key): // an endpoint, a bit where a map took ~50 bytes
		w := int(id / 64)
		if w >= len(b.ofParent) {
			b.ofParent = slices.Grow(b.ofParent, w+1-len(b.ofParent))[:w+1]
		}
		b.ofParent[w] |= 1 << (id % 64)
	default:
		b.owners[n] = owner
	}
}

// spec describes a node to place: its records, shape and flags.
type spec struct {
	id arena.ID
	n  *node // from newNode, filled by place
	// ref and canonical are the first name's text and FQDN.
	ref       uint32
	canonical string
	owner     string
	a, aaaa   []dns.RR
	txt       []dns.RR
	cname     dns.RR // the only record of a chase node
	shape     int
	flags     uint8
	// under marks an endpoint: its names lie under its service's.
	under bool
}

// probeEntries is the fewest entries whose names predict a table's.
const probeEntries = 1024

// expectNames is the number of names the table will hold, estimated
// from the names per entry so far and the entries expected (NewBuilder's
// hint), or 0 if unknown. Sized for that when it must grow, the index
// grows once (a table of services with endpoints holds more names than
// entries), where doubling left it at a load Compact had to rehash.
func (b *builder) expectNames() int {
	if b.hint == 0 || b.added == 0 {
		return 0
	}
	return int(int64(b.t.st.Len()) * int64(b.hint) / int64(b.added))
}

// place stores s under names: names[0] is the name s.ref holds, the others
// (alt hosts) get a node of their own with the same records and flagCopy.
// Names starting with "*." are wildcards. A name may be defined once; a
// zone apex (which has no owner) is taken over, its SOA joining the
// records of every name of s, as they share them.
func (b *builder) place(s *spec, names []string) error {
	t := b.t
	var soa []dns.RR
	// The first name is stored where its lookup found room: Reserve
	// keeps that spot until then.
	t.st.Reserve(len(names), b.expectNames())
	var first arena.Spot
	for i, name := range names {
		if w, ok := strings.CutPrefix(name, "*."); ok {
			if old, dup := t.wild[w]; dup {
				return fmt.Errorf("name %q already defined by entry %q", name, b.ownerOf(old))
			}
			continue
		}
		sp, old := t.st.SpotOf(name)
		if i == 0 {
			first = sp
		}
		if old != nil {
			// The names a table defines itself give way to an entry:
			// zone apexes, empty non-terminals and dns-version
			// (which only Patch meets: New adds it last).
			if !old.is(flagNoCanon) && !old.isVersion() {
				return fmt.Errorf("name %q already defined by entry %q", name, b.ownerOf(old))
			}
			soa = append(slices.Clip(t.set(old, setSOA)), soa...)
		}
	}
	n := s.n
	*n = node{Head: arena.Head{Name: s.ref}, flags: s.flags}
	if s.cname != nil {
		rrs, ref := b.t.st.PutRecords(1)
		rrs[0] = s.cname
		n.RR, n.nA = ref, 1 // read by all, never as an A set (flagChase)
		n.flags |= flagChase
	} else {
		if total := len(s.a) + len(s.aaaa); total > maxRecords {
			return fmt.Errorf("name %q: %d addresses, more than %d", names[0], total, maxRecords)
		}
		if len(soa) > maxTail {
			return fmt.Errorf("name %q: the apex of more than %d zones", names[0], maxTail)
		}
		rrs, ref := b.t.st.PutRecords(len(s.a) + len(s.aaaa) + len(s.txt) + len(soa))
		i := copy(rrs, s.a)
		i += copy(rrs[i:], s.aaaa)
		i += copy(rrs[i:], s.txt)
		copy(rrs[i:], soa)
		n.RR = ref
		n.nA, n.nAAAA = uint16(len(s.a)), uint16(len(s.aaaa))
		n.tail = uint8(len(s.txt)<<4 | len(soa))
	}
	b.setShape(n, s.shape)
	b.setOwner(s.id, n, s.owner)
	for i, name := range names {
		if w, ok := strings.CutPrefix(name, "*."); ok {
			if t.wild == nil {
				t.wild = make(map[string]*node)
			}
			t.wild[w] = n
			t.st.Ref(s.id, 1)
			if b.placed != nil {
				*b.placed = append(*b.placed, "*."+w)
			}
			continue
		}
		if i == 0 {
			t.st.Put(first, s.id)
			b.track(n)
			b.stored(name, !s.under)
			continue
		}
		id, c, err := b.t.st.NewNode()
		if err != nil {
			return err
		}
		*c = *n
		c.Name, _ = b.t.st.PutText("", name)
		c.flags |= flagCopy
		if t.canonOf == nil {
			t.canonOf = make(map[*node]string)
		}
		t.canonOf[c] = s.canonical
		if n.shape == bigShape {
			t.bigShape[c] = t.bigShape[n]
		}
		b.setOwner(id, c, s.owner)
		t.st.Insert(id)
		b.track(c)
		b.stored(name, !s.under)
	}
	return nil
}

// finish completes the table once every entry is in.
func (b *builder) finish() {
	t := b.t
	b.finishReverse()
	b.addVersion()
	b.markReverse()
	b.addEmptyNonTerminals()
	t.st.Compact()
	b.setRevNs()
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
	b.setAlt()
}

// setRevNs sets the SOA of a reverse name outside every zone (apexFor
// gives the same answer for all of them; Lookup tries the zones first).
func (b *builder) setRevNs() {
	if b.t.revAddrs > 0 {
		b.t.revNs = [2][]dns.RR{
			*b.soa(b.apexFor("in-addr.arpa", "in-addr.arpa")),
			*b.soa(b.apexFor("ip6.arpa", "ip6.arpa")),
		}
	}
}

// setAlt turns the Kubernetes alternate names on once an entry has them.
func (b *builder) setAlt() {
	t := b.t
	if b.hasAlt {
		svc := ".svc." + b.pod.ClusterDomain
		t.altNs = svc
		t.altSvc = "." + b.pod.ClusterDomain
		if b.pod.Namespace != "" {
			t.altBare = "." + b.pod.Namespace + svc
		}
	}
}

// zonesHoldReverse reports whether a zone may contain reverse names, whose
// ancestors are then empty non-terminals.
func (b *builder) zonesHoldReverse() bool { return zonesHoldReverse(b.zones) }

func zonesHoldReverse(zones []string) bool {
	for _, z := range zones {
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
	return ok && b.t.hasReverse(k)
}

// addVersion adds dns-version.<cluster domain> TXT (Kubernetes DNS
// specification section 2.2) unless an entry already defines the name.
func (b *builder) addVersion() {
	key := "dns-version." + b.pod.ClusterDomain
	if b.lookup(key) != nil {
		return
	}
	id, n, err := b.t.st.NewNode()
	if err != nil {
		return // a table of 16 million names can do without it
	}
	ref, fqdn := b.t.st.PutText("", key)
	rrs, rr := b.t.st.PutRecords(1)
	rrs[0] = txtRR(fqdn, dnsSchemaVersion, versionTTL)
	*n = node{Head: arena.Head{Name: ref, RR: rr}, tail: 1 << 4}
	b.setShape(n, b.shapeFor(b.apexFor(key, b.pod.ClusterDomain), 0, nil, nil, nil))
	b.t.st.Insert(id)
	b.stored(key, true)
}

// shapeFor returns the index in Table.shapes of the shape of a node in
// zone apex with SRV TTL ttl and ports, shared with every node of the same
// ones; a headless service's (SRV targets of its own) is not shared.
func (b *builder) shapeFor(apex string, ttl uint32, ports []srvPort, targets []string, extra []dns.RR) int {
	t := b.t
	if targets != nil {
		sh := &shape{ns: *b.soa(apex), ttl: ttl, ports: slices.Clone(ports), targets: targets, extra: extra}
		if k := len(t.freeShapes); k > 0 {
			i := t.freeShapes[k-1]
			t.freeShapes = t.freeShapes[:k-1]
			t.shapes[i] = sh
			return i
		}
		t.shapes = append(t.shapes, sh)
		return len(t.shapes) - 1
	}
	if len(ports) == 0 {
		ttl = 0 // the key has no TTL without ports
	}
	for _, r := range b.recent {
		if r.i > 0 && r.apex == apex && r.ttl == ttl && slices.Equal(r.ports, ports) {
			return r.i - 1
		}
	}
	key := appendShapeKey(b.keyBuf[:0], apex, ttl, ports)
	b.keyBuf = key
	i, ok := b.shapes[string(key)]
	if !ok {
		sh := &shape{ns: *b.soa(apex), ports: slices.Clone(ports), ttl: ttl}
		t.shapes = append(t.shapes, sh)
		i = len(t.shapes) - 1
		b.shapes[string(key)] = i
	}
	b.recent[b.nextRecent] = recentShape{apex: apex, ttl: ttl, ports: t.shapes[i].ports, i: i + 1}
	b.nextRecent = (b.nextRecent + 1) % len(b.recent)
	return i
}

// recentShape is a shape shapeFor found or made lately: most services
// have one of a few, found so without building and hashing a key. The
// port labels come from builder.portLabels, the same strings for the
// same port, so that comparing them compares pointers.
type recentShape struct {
	apex  string
	ttl   uint32
	ports []srvPort // the shape's own
	i     int       // index in Table.shapes + 1; 0: none
}

// appendShapeKey appends the key under which builder.shapes finds the
// shared shape of a node in zone apex with SRV TTL ttl and ports.
func appendShapeKey(key []byte, apex string, ttl uint32, ports []srvPort) []byte {
	key = append(key, apex...)
	if len(ports) > 0 {
		key = binary.AppendUvarint(append(key, 0), uint64(ttl))
		for _, p := range ports {
			key = append(append(key, byte(len(p.label))), p.label...)
			key = binary.AppendUvarint(key, uint64(p.port))
		}
	}
	return key
}

// setShape points n at shape i.
func (b *builder) setShape(n *node, i int) {
	if i < bigShape {
		n.shape = uint16(i)
		return
	}
	n.shape = bigShape
	if b.t.bigShape == nil {
		b.t.bigShape = make(map[*node]*shape)
	}
	b.t.bigShape[n] = b.t.shapes[i]
}
