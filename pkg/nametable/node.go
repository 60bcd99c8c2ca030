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
// A table holds two or more nodes per service (the service, one per address
// for PTR, one per endpoint), so the layout is kept to 80 bytes: the
// record sets sit back to back in one slice (set i is rrs[end[i-1]:end[i]]),
// the sections shared between nodes are pointers, and an ExternalName
// target lives in a CNAME record instead of its own string field.
type node struct {
	// canonical is the FQDN with trailing dot that search-path expansion
	// aliases to; "" for nodes that only exist to say NODATA.
	canonical string
	// rrs holds the record sets; a chase node has none (see chaseTarget).
	rrs []dns.RR
	// extra is the additional section of an SRV answer when the targets
	// are endpoints (their A/AAAA records); or nil.
	extra *[]dns.RR
	// ns is the SOA of the enclosing zone, for NODATA answers; shared.
	ns  *[]dns.RR
	end [numSets - 1]uint32 // end of each set but the last (SOA) in rrs
	// alt is set on the names of a Kubernetes service in the pod's cluster
	// domain: only they answer to the alternate names svc.ns, svc.ns.svc
	// and svc.
	alt bool
	// chase marks an ExternalName or a wildcard with a canonical name.
	chase bool
	// extraSelf marks a service that is its own SRV target: the
	// additional section is its own A and AAAA sets, so it costs nothing.
	extraSelf bool
}

// srvExtra is the additional section of an SRV answer from n.
func (n *node) srvExtra() []dns.RR {
	if n.extraSelf {
		hi := n.end[setAAAA]
		return n.rrs[:hi:hi]
	}
	if n.extra != nil {
		return *n.extra
	}
	return nil
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

// chaseTarget is the ExternalName target, FQDN with trailing dot, from
// the CNAME pack keeps just beyond the length of a chase node's rrs.
func (n *node) chaseTarget() string {
	return n.rrs[:1][0].(*dns.CNAME).Target
}

// draft is a node under construction: separate growable sets plus what
// New needs to finish it.
type draft struct {
	canonical string
	chase     string
	sets      [numSets][]dns.RR
	extra     *[]dns.RR
	extraSelf bool
	alt       bool
	ttl       uint32
	// apex is the zone whose SOA goes into negative answers.
	apex string
	// owner is the hostname of the entry that defined the name, to report
	// duplicates; "" for names that only exist as reverse names or zone
	// apexes, which an entry may take over.
	owner string
	built *node
}

// pack turns the draft into its immutable node, once; soa gives the SOA
// set of a zone apex.
func (d *draft) pack(soa func(apex string) *[]dns.RR) *node {
	if d.built != nil {
		return d.built
	}
	n := &node{
		canonical: d.canonical,
		extra:     d.extra,
		extraSelf: d.extraSelf,
		ns:        soa(d.apex),
		alt:       d.alt,
	}
	d.built = n
	if d.chase != "" {
		n.chase = true
		// Length 0, capacity 1: every record set reads empty, and only
		// chaseTarget reaches the CNAME.
		n.rrs = []dns.RR{&dns.CNAME{Hdr: header(d.canonical, dns.TypeCNAME, d.ttl), Target: d.chase}}[:0]
		return n
	}
	total := 0
	for _, s := range d.sets {
		total += len(s)
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
	return n
}
