package nametable

import (
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/nametable/internal/arena"
)

// Record sets a node holds, in the order they are packed into its records.
// SRV and PTR records are not stored: Lookup builds them from the ports
// (shape) and the reverse index, since they are asked for rarely and the
// proxy caches the packed answer per table.
const (
	setA = iota
	setAAAA
	setTXT
	setSOA
	numSets
)

// node holds the precomputed answers of one stored name. It is immutable
// once the table is built.
//
// A table holds a node per stored name, so a node is 16 bytes of offsets
// into the table's chunks instead of strings, slices and pointers: its
// name (whose bytes are also its canonical name, and the owner of its
// address records) in Table.text, its records, back to back, in
// Table.rrs, and what many nodes have in common (SOA, ports) in
// Table.shapes. An ExternalName target lives in a CNAME record, the only
// record of a chase node.
type node struct {
	// Head holds the text reference of the stored name and the record
	// reference of the first record (the arena reads them).
	arena.Head
	// Records in each set: A and AAAA; TXT (dns-version) and SOA (zone
	// apexes), 4 bits each, in tail.
	nA, nAAAA uint16
	shape     uint16 // index in Table.shapes, or bigShape
	tail      uint8
	flags     uint8
}

// maxTail is the most TXT or SOA records a node holds: one TXT record
// (dns-version), one SOA per zone apex among the entry's names.
const maxTail = 15

func (n *node) count() uint32 {
	return uint32(n.nA) + uint32(n.nAAAA) + uint32(n.tail>>4) + uint32(n.tail&maxTail)
}

// bounds returns where set i lies in n's records.
func (n *node) bounds(i int) (lo, hi uint32) {
	sizes := [numSets]uint32{uint32(n.nA), uint32(n.nAAAA), uint32(n.tail >> 4), uint32(n.tail & maxTail)}
	for j := range i {
		lo += sizes[j]
	}
	return lo, lo + sizes[i]
}

// Node flags.
const (
	// flagAlt is set on the names of a Kubernetes service in the pod's
	// cluster domain: only they answer to the alternate names svc.ns,
	// svc.ns.svc and svc.
	flagAlt = 1 << iota
	// flagChase marks an ExternalName or a wildcard with a canonical name.
	flagChase
	// flagRev marks the names of an entry one of whose names is the
	// reverse name of an address in the reverse index: their PTR records
	// come from there (Table.revOf).
	flagRev
	// flagCopy marks a name stored beside the one that defined its
	// records (an alt host, an endpoint under an alt host): its canonical
	// name is in Table.canonOf.
	flagCopy
	// flagNoCanon marks a name that exists only to say NODATA or hold a
	// zone's SOA (empty non-terminals, zone apexes): it has no canonical
	// name, and an entry may take it over.
	flagNoCanon
	// flagPublicNS and flagPublicShort mark the names of a Kubernetes
	// service whose namespace, or (in the pod's namespace) whose own
	// name, is a top-level domain: asked as written, its svc.ns or svc
	// form is a public name, and answers only under a search domain
	// (public.go).
	flagPublicNS
	flagPublicShort
	// flagZoned marks the names of a headless service whose A or AAAA
	// set starts with endpoints in the pod's zone: their counts are in
	// the shape (shape.local).
	flagZoned
)

// bigShape in node.shape says the shape is in Table.bigShape: the
// uint16 index ran out (more than 65,534 headless services or distinct
// port sets).
const bigShape = 1<<16 - 1

// maxRecords is the most records one name holds: node counts are
// uint16. A DNS message carries at most 4,095 address records.
const maxRecords = 1<<16 - 1

// shape is the part of a node that many nodes share: every ClusterIP
// service of a namespace with the usual ports has the same one, so SRV
// answers cost no memory per service.
type shape struct {
	// ns is the SOA of the enclosing zone, for NODATA answers.
	ns []dns.RR
	// ttl of the SRV records, seconds.
	ttl uint32
	// ports in SRV answer order (grouped by owner); nil when the node
	// answers no SRV.
	ports []srvPort
	// targets are the SRV targets of a headless service (its endpoint
	// FQDNs) and extra their A/AAAA records for the additional section;
	// nil targets: the node is its own target and its own A/AAAA sets are
	// the additional section.
	targets []string
	extra   []dns.RR
	// local is the number of leading records of a headless service's A
	// and AAAA sets in the pod's zone (flagZoned).
	local [2]uint16
}

// srvPort is one port of a service.
type srvPort struct {
	// label is "_name._proto." (lowercase) of a named port, "" for an
	// unnamed one, which answers only on the service name.
	label string
	port  uint16
}

func (n *node) is(flag uint8) bool { return n.flags&flag != 0 }

// isENT reports whether n is an empty non-terminal: no records, no
// canonical name (a zone apex holds its SOA).
func (n *node) isENT() bool { return n.is(flagNoCanon) && n.count() == 0 }

// isVersion reports whether n is the table's own dns-version name: only
// it holds a TXT record.
func (n *node) isVersion() bool { return n.tail>>4 != 0 }

// group identifies the records n shares with the other names of its entry
// (alt hosts are copies of the node with the same records).
func (n *node) group() uint64 { return uint64(n.RR)<<32 | uint64(n.count()) }

// all returns every record of n.
func (t *Table) all(n *node) []dns.RR { return t.st.Records(n.RR, n.count()) }

// set returns record set i of n, capacity-limited so that an append by a
// careless caller cannot write into the next set.
func (t *Table) set(n *node, i int) []dns.RR {
	if n.is(flagChase) {
		return nil
	}
	lo, hi := n.bounds(i)
	if lo == hi {
		return nil
	}
	return t.all(n)[lo:hi:hi]
}

// addrs is n's A and AAAA sets together.
func (t *Table) addrs(n *node) []dns.RR {
	if n.is(flagChase) {
		return nil
	}
	hi := uint32(n.nA) + uint32(n.nAAAA)
	return t.all(n)[:hi:hi]
}

// cname is the CNAME record of a chase node.
func (t *Table) cname(n *node) *dns.CNAME { return t.all(n)[0].(*dns.CNAME) }

// shapeOf returns n's shape; never nil.
func (t *Table) shapeOf(n *node) *shape {
	if n.shape == bigShape {
		return t.bigShape[n]
	}
	return t.shapes[n.shape]
}

// canonical is the FQDN with trailing dot that search-path expansion
// aliases to and SRV and PTR records point at; "" for names that only
// exist to say NODATA.
func (t *Table) canonical(n *node) string {
	switch {
	case n.is(flagNoCanon):
		return ""
	case n.is(flagCopy):
		return t.canonOf[n]
	}
	return t.st.FQDN(n.Name)
}
