package nametable

import "github.com/miekg/dns"

// Record sets a node holds, in the order they are packed into node.rrs.
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

// node holds the precomputed answers of one name. It is immutable once the
// table is built and shared by every name that answers like it.
//
// A table holds one or more nodes per service, so the layout is kept to 64
// bytes: the record sets sit back to back in one slice (set i is
// rrs[end[i-1]:end[i]]), what many nodes have in common (SOA, ports) is
// behind one shared pointer, and an ExternalName target lives in a CNAME
// record, the only record of a chase node, instead of its own field.
type node struct {
	// canonical is the FQDN with trailing dot that search-path expansion
	// aliases to and SRV and PTR records point at; "" for nodes that only
	// exist to say NODATA.
	canonical string
	// rrs holds the record sets; a chase node holds its CNAME instead.
	rrs []dns.RR
	// shape is shared by nodes of the same zone, TTL and ports; never nil.
	shape *shape
	end   [numSets - 1]uint32 // end of each set but the last (SOA) in rrs
	// alt is set on the names of a Kubernetes service in the pod's cluster
	// domain: only they answer to the alternate names svc.ns, svc.ns.svc
	// and svc.
	alt bool
	// chase marks an ExternalName or a wildcard with a canonical name.
	chase bool
	// rev marks a node stored under the reverse name of an address in the
	// reverse index: its PTR records come from there (Table.revOf).
	rev bool
}

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
}

// srvPort is one port of a service.
type srvPort struct {
	// label is "_name._proto." (lowercase) of a named port, "" for an
	// unnamed one, which answers only on the service name.
	label string
	port  uint16
}

// set returns record set i, capacity-limited so that an append by a
// careless caller cannot write into the next set.
func (n *node) set(i int) []dns.RR {
	if n.chase {
		return nil
	}
	lo := uint32(0)
	if i > 0 {
		lo = n.end[i-1]
	}
	hi := uint32(len(n.rrs))
	if i < len(n.end) {
		hi = n.end[i]
	}
	if lo == hi {
		return nil
	}
	return n.rrs[lo:hi:hi]
}

// addrs is the node's A and AAAA sets together.
func (n *node) addrs() []dns.RR {
	if n.chase {
		return nil
	}
	hi := n.end[setAAAA]
	return n.rrs[:hi:hi]
}

// cname is the CNAME record of a chase node.
func (n *node) cname() *dns.CNAME { return n.rrs[0].(*dns.CNAME) }

// draft is a node under construction: separate growable sets plus what
// New needs to finish it.
type draft struct {
	canonical string
	chase     string
	sets      [numSets][]dns.RR
	ports     []srvPort
	targets   []string // see shape
	extra     []dns.RR
	alt       bool
	// revAddrs are the indexed addresses whose reverse names the draft
	// is stored under (see node.rev).
	revAddrs [][16]byte
	ttl      uint32
	// apex is the zone whose SOA goes into negative answers.
	apex string
	// owner is the hostname of the entry that defined the name, to report
	// duplicates; "" for names that only exist as zone apexes or empty
	// non-terminals, which an entry may take over.
	owner string
	built *node
}
