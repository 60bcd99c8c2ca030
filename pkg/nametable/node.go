package nametable

import "github.com/miekg/dns"

// Record sets a node holds, in the order they are packed into node.rrs.
const (
	setA = iota
	setAAAA
	setSRV
	setPTR
	setTXT
	setSOA
	numSets
)

// node holds the precomputed answers of one name. It is immutable once the
// table is built and shared by every name that answers like it.
//
// The record sets sit back to back in one slice (rrs[end[i-1]:end[i]] is
// set i) so a node costs one small allocation instead of one per type: a
// table holds several nodes per service.
type node struct {
	// canonical is the FQDN with trailing dot that search-path expansion
	// aliases to; "" for nodes that only exist to say NODATA.
	canonical string
	// chase is the ExternalName target (FQDN with trailing dot), or "".
	chase string
	rrs   []dns.RR
	end   [numSets - 1]uint32 // end of each set but the last (SOA) in rrs
	// extra is the additional section of an SRV answer: the A/AAAA records
	// of the targets.
	extra []dns.RR
	// ns is the SOA of the enclosing zone, for NODATA answers.
	ns []dns.RR
	// alt is set on the names of a Kubernetes service in the pod's cluster
	// domain: only they answer to the alternate names svc.ns, svc.ns.svc
	// and svc.
	alt bool
}

// set returns record set i, capacity-limited so that an append by a
// careless caller cannot write into the next set.
func (n *node) set(i int) []dns.RR {
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

// draft is a node under construction: separate growable sets plus what
// New needs to finish it.
type draft struct {
	canonical string
	chase     string
	sets      [numSets][]dns.RR
	extra     []dns.RR
	alt       bool
	// apex is the zone whose SOA goes into negative answers.
	apex string
	// owner is the hostname of the entry that defined the name, to report
	// duplicates; "" for names that only exist as PTR targets' reverse
	// names or zone apexes, which an entry may take over.
	owner string
	built *node
}

// pack turns the draft into its immutable node, once; soa gives the SOA
// set of a zone apex.
func (d *draft) pack(soa func(apex string) []dns.RR) *node {
	if d.built != nil {
		return d.built
	}
	total := 0
	for _, s := range d.sets {
		total += len(s)
	}
	n := &node{
		canonical: d.canonical,
		chase:     d.chase,
		extra:     d.extra,
		ns:        soa(d.apex),
		alt:       d.alt,
	}
	if total > 0 {
		n.rrs = make([]dns.RR, 0, total)
	}
	for i, s := range d.sets {
		n.rrs = append(n.rrs, s...)
		if i < len(n.end) {
			n.end[i] = uint32(len(n.rrs))
		}
	}
	d.built = n
	return n
}
