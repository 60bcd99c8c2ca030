package nametable

import (
	"bytes"
	"strings"

	"github.com/miekg/dns"
)

// Lookup answers q. The question name may be in any case, with or without
// the trailing dot. Lookup allocates nothing for A, AAAA, NODATA and
// NXDOMAIN answers, whatever way the name is found: the name is lowercased
// into a stack buffer, m[string(bytes)] map lookups do not copy, and the
// returned slices are precomputed and shared. SRV and PTR answers (and an
// Alias to a port name) are built per question and allocate: they are
// rare, and the proxy packs each answer once per table and caches it.
//
// The order of the rules (docs/design.md, Answer rules):
//  1. the name itself: a stored or reverse name, a named port of a service
//     (_name._proto.<service>), a Kubernetes alternate name (svc, svc.ns,
//     svc.ns.svc), or the most specific wildcard;
//  2. search-path expansion: for each search domain in resolv.conf order,
//     a name X.<search domain> where X is known by rule 1 answers with
//     Alias = canonical name of X;
//  3. pod names under pod.<cluster domain>, synthesized from the name
//     (pods.go), or forwarded with Context.ForwardPods;
//  4. inside an authoritative zone: NXDOMAIN with the zone's SOA;
//  5. otherwise Forward.
//
// A literal wildcard match (rule 1) wins over search-path expansion: it is
// what the resolver would get for the name without this table.
func (t *Table) Lookup(q dns.Question) Result {
	if t == nil || (q.Qclass != dns.ClassINET && q.Qclass != 0) {
		return Result{Action: Forward}
	}
	var buf [maxName + 2]byte
	key, ok := lowerKey(&buf, q.Name)
	if !ok {
		return t.impossible(q.Name)
	}
	if m := t.find(key, true); m.found() {
		return t.answer(m, key, q.Qtype, "")
	}
	for _, s := range t.search {
		if len(key) <= len(s) || string(key[len(key)-len(s):]) != s {
			continue
		}
		x := key[:len(key)-len(s)]
		m := t.find(x, false)
		alias := t.alias(m, x, q.Name)
		if alias == "" {
			continue // unknown, or a name that exists only to say NODATA
		}
		return t.answer(m, x, q.Qtype, alias)
	}
	if t.podZone != "" && inZoneKey(key, t.podZone) {
		return t.podRecord(key, q.Qtype)
	}
	if z := t.zoneOf(key); z != nil && len(key) > len(z.name) {
		return Result{Action: Answer, Rcode: dns.RcodeNameError, Ns: z.soa}
	}
	return Result{Action: Forward}
}

// inZoneKey reports whether the lowercase name key is zone or below it.
func inZoneKey(key []byte, zone string) bool {
	return string(key) == zone ||
		(len(key) > len(zone) && key[len(key)-len(zone)-1] == '.' && string(key[len(key)-len(zone):]) == zone)
}

// match is what a name resolves to: a node, part of a service's node for
// the names under it that are not stored (SRV owners), or an address of
// the reverse index.
type match struct {
	n *node // nil: no match, or a reverse name that is not stored
	// port is "_name._proto." for a port name: the label of the service's
	// SRV records it answers with.
	port string
	// proto is set for _proto.<service>: an empty non-terminal above the
	// port names.
	proto bool
	// wild is set for a wildcard match.
	wild bool
	// rev is set for a reverse name of an indexed address, addr, that is
	// not stored (n is nil).
	rev  bool
	addr [16]byte
}

func (m match) found() bool { return m.n != nil || m.rev }

// alias is the name search-path expansion aliases to for m, or "" for
// names that only say NODATA. x is the lowercase name found, qname the
// question name it starts.
func (t *Table) alias(m match, x []byte, qname string) string {
	switch {
	case !m.found() || m.proto:
		return ""
	case m.wild:
		// The canonical name of a wildcard match is X itself: the
		// question's own bytes up to and including the dot before the
		// search domain, so no allocation.
		return qname[:len(x)+1]
	case m.port != "":
		return m.port + t.canonical(m.n)
	case m.n == nil:
		// A reverse name is its own canonical name, in lowercase.
		if qname[:len(x)] == string(x) {
			return qname[:len(x)+1]
		}
		return string(x) + "."
	}
	return t.canonical(m.n)
}

// find resolves key (lowercase, no trailing dot) by rule 1 of Lookup.
// asked is set for a name as the client wrote it (or an ExternalName's
// target), clear for the X of a search-expanded name: a Kubernetes
// alternate name that could be a public one answers only under a search
// domain (public.go).
func (t *Table) find(key []byte, asked bool) match {
	if n := t.st.Lookup(key); n != nil {
		return match{n: n}
	}
	if k, ok := t.findReverse(key); ok {
		return match{rev: true, addr: k}
	}
	if len(key) > 0 && key[0] == '_' {
		if m := t.findPort(key, asked); m.n != nil {
			return m
		}
	}
	if t.altNs != "" {
		if n := t.findAlt(key, asked); n != nil {
			return match{n: n}
		}
	}
	if len(t.wild) > 0 {
		// Most specific first: a.b.example.com tries *.b.example.com
		// before *.example.com. A wildcard never matches its own domain.
		for i := 0; i < len(key); i++ {
			if key[i] != '.' {
				continue
			}
			if n, ok := t.wild[string(key[i+1:])]; ok {
				return match{n: n, wild: true}
			}
		}
	}
	return match{}
}

// findService finds a stored or alternate name, not a wildcard: the
// service a port name is under.
func (t *Table) findService(key []byte, asked bool) *node {
	if n := t.st.Lookup(key); n != nil {
		return n
	}
	if t.altNs != "" {
		return t.findAlt(key, asked)
	}
	return nil
}

// findPort resolves the SRV names of a service: _name._proto.<service>
// exists when the service has a port of that name and protocol, and
// _proto.<service> when a named port uses the protocol. Deriving these
// names from the service keeps two map entries and two nodes per service
// out of the table, and makes every alternate name and alt host of the
// service answer SRV too.
func (t *Table) findPort(key []byte, asked bool) match {
	i := bytes.IndexByte(key, '.')
	if i < 0 {
		return match{}
	}
	rest := key[i+1:]
	if len(rest) > 0 && rest[0] == '_' {
		j := bytes.IndexByte(rest, '.')
		if j < 0 {
			return match{}
		}
		n := t.findService(rest[j+1:], asked)
		if n == nil {
			return match{}
		}
		prefix := key[:i+1+j+1] // "_name._proto."
		for _, p := range t.shapeOf(n).ports {
			if p.label == string(prefix) {
				return match{n: n, port: p.label}
			}
		}
		return match{}
	}
	n := t.findService(rest, asked)
	if n == nil {
		return match{}
	}
	proto := key[:i+1] // "_tcp."
	for _, p := range t.shapeOf(n).ports {
		if k := strings.IndexByte(p.label, '.'); k >= 0 && p.label[k+1:] == string(proto) {
			return match{n: n, proto: true}
		}
	}
	return match{}
}

// findAlt resolves a Kubernetes alternate name by appending what the
// pod's resolver would append, in resolv.conf order (<ns>.svc.<domain>,
// svc.<domain>, <domain>). Only names of Kubernetes services in the pod's
// cluster domain (node.alt) answer this way. Deriving these names here
// instead of storing them keeps the table at one entry per name. With
// asked set, the forms whose last label is a top-level domain (flagged on
// the service's nodes when it was added) are skipped: as written, such a
// name is someone's public name.
func (t *Table) findAlt(key []byte, asked bool) *node {
	var buf [maxName + 2]byte
	for i, suffix := range [...]string{t.altBare, t.altNs, t.altSvc} {
		if suffix == "" || len(key)+len(suffix) > maxName {
			continue
		}
		// Only svc.ns.svc completes with the bare cluster domain.
		if i == 2 && (len(key) < 4 || string(key[len(key)-4:]) != ".svc") {
			continue
		}
		n := copy(buf[:], key)
		n += copy(buf[n:], suffix)
		if nd := t.st.Lookup(buf[:n]); nd != nil && nd.is(flagAlt) {
			if asked && nd.is(publicForm[i]) {
				continue
			}
			return nd
		}
	}
	return nil
}

// answer is the Result for a question of type qtype on m, found as key.
func (t *Table) answer(m match, key []byte, qtype uint16, alias string) Result {
	n := m.n
	r := Result{Action: Answer, Rcode: dns.RcodeSuccess, Alias: alias}
	if n != nil && n.is(flagChase) {
		r.Answer = t.all(n)
		// A question for the CNAME type itself is answered by the CNAME
		// alone, with nothing chased (RFC 1034 section 3.6.2).
		if qtype != dns.TypeCNAME {
			t.follow(&r, t.cname(n).Target, qtype)
		}
		return r
	}
	switch {
	case m.proto:
		// An empty non-terminal: NODATA for every type.
	case m.port != "":
		if qtype == dns.TypeSRV || qtype == dns.TypeANY {
			r.Answer, r.Extra = t.srv(n, m.port)
		}
	case n == nil:
		if qtype == dns.TypePTR || qtype == dns.TypeANY {
			r.Answer = t.ptrs(m.addr)
		}
	default:
		r.Answer, r.Extra = t.records(m, qtype)
		if n.is(flagZoned) {
			r.Local = t.local(n, r.Answer)
		}
	}
	if len(r.Answer) == 0 {
		// NODATA (RFC 2308 section 2.2): the name exists, the type does
		// not. Never NXDOMAIN: clients ask A and AAAA in parallel and an
		// NXDOMAIN for one family would fail the other.
		if n != nil {
			r.Ns = t.shapeOf(n).ns
		} else {
			r.Ns = t.revNS(key, m.addr)
		}
	}
	return r
}

// records returns the records of type qtype of the node m found, and the
// additional section of an SRV answer.
func (t *Table) records(m match, qtype uint16) (ans, extra []dns.RR) {
	n := m.n
	switch qtype {
	case dns.TypeA:
		return t.set(n, setA), nil
	case dns.TypeAAAA:
		return t.set(n, setAAAA), nil
	case dns.TypeSRV:
		return t.srv(n, "")
	case dns.TypePTR:
		if !n.is(flagRev) {
			return nil, nil
		}
		for _, k := range t.revOf[n.group()] {
			ans = append(ans, t.ptrs(k)...)
		}
		return ans, nil
	case dns.TypeTXT:
		return t.set(n, setTXT), nil
	case dns.TypeSOA:
		return t.set(n, setSOA), nil
	case dns.TypeANY:
		// RFC 8482 section 4.2: answer ANY with one RRset of our choice
		// rather than everything: the first of A, AAAA, SRV, PTR, TXT,
		// SOA the name has.
		for _, qt := range [...]uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypePTR, dns.TypeTXT, dns.TypeSOA} {
			if ans, extra = t.records(m, qt); len(ans) > 0 {
				return ans, extra
			}
		}
	}
	return nil, nil
}

// srv builds the SRV records of the ports labelled label ("" for every
// port) and their additional section. It allocates.
func (t *Table) srv(n *node, label string) (ans, extra []dns.RR) {
	sh := t.shapeOf(n)
	canonical := t.canonical(n)
	for _, p := range sh.ports {
		if label != "" && p.label != label {
			continue
		}
		owner := canonical
		if p.label != "" {
			owner = p.label + canonical
		}
		if sh.targets == nil {
			ans = append(ans, srvRR(owner, canonical, p.port, sh.ttl))
			continue
		}
		for _, target := range sh.targets {
			ans = append(ans, srvRR(owner, target, p.port, sh.ttl))
		}
	}
	if len(ans) == 0 {
		return nil, nil
	}
	spreadWeights(ans)
	if sh.targets == nil {
		return ans, t.addrs(n)
	}
	return ans, sh.extra
}

// maxChain bounds how many ExternalNames follow one another inside the
// table before the answer is a loop (SERVFAIL), as resolvers bound CNAME
// chains.
const maxChain = 8

// follow completes the answer of an ExternalName whose CNAME points at
// target: a target the table knows is answered from the table (further
// ExternalNames as CNAMEs, then the records of qtype, or NODATA), one
// inside an authoritative zone that the table does not know is NXDOMAIN,
// and anything else is left to the server to chase upstream. It allocates
// (the records are copied to carry their real owners); the proxy packs the
// answer once per table.
func (t *Table) follow(r *Result, target string, qtype uint16) {
	for range maxChain {
		var buf [maxName + 2]byte
		key, ok := lowerKey(&buf, target)
		if !ok {
			r.Chase = target
			return
		}
		m := t.find(key, true)
		if !m.found() {
			if z := t.zoneOf(key); z != nil {
				r.Rcode, r.Ns = dns.RcodeNameError, z.soa
				return
			}
			r.Chase = target
			return
		}
		if m.n != nil && m.n.is(flagChase) {
			c := t.cname(m.n)
			r.Chain = append(r.Chain, &dns.CNAME{Hdr: header(target, dns.TypeCNAME, c.Hdr.Ttl), Target: c.Target})
			target = c.Target
			continue
		}
		res := t.answer(m, key, qtype, "")
		for _, rr := range res.Answer {
			c := dns.Copy(rr)
			c.Header().Name = target
			r.Chain = append(r.Chain, c)
		}
		r.Ns, r.Extra, r.Local = res.Ns, res.Extra, res.Local
		return
	}
	r.Rcode, r.Chain = dns.RcodeServerFailure, nil
}

// zoneOf returns the closest authoritative zone containing the lowercase
// name key, or nil.
func (t *Table) zoneOf(key []byte) *zone {
	for i := range t.zones {
		if inZoneKey(key, t.zones[i].name) {
			return &t.zones[i]
		}
	}
	return nil
}
