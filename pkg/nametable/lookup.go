package nametable

import (
	"bytes"
	"strings"

	"github.com/miekg/dns"
)

// Lookup answers q. The question name may be in any case, with or without
// the trailing dot. Lookup allocates nothing: the name is lowercased into
// a stack buffer, m[string(bytes)] map lookups do not copy, and every
// returned slice is precomputed and shared.
//
// The order of the rules (DESIGN.md section 4):
//  1. the name itself: a stored name, a named port of a service
//     (_name._proto.<service>), a Kubernetes alternate name (svc, svc.ns,
//     svc.ns.svc), or the most specific wildcard;
//  2. search-path expansion: for each search domain in resolv.conf order,
//     a name X.<search domain> where X is known by rule 1 answers with
//     Alias = canonical name of X;
//  3. inside an authoritative zone: NXDOMAIN with the zone's SOA;
//  4. otherwise Forward.
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
		return Result{Action: Forward}
	}
	if m := t.find(key); m.n != nil {
		return m.answer(q.Qtype, "")
	}
	for _, s := range t.search {
		if len(key) <= len(s) || string(key[len(key)-len(s):]) != s {
			continue
		}
		x := key[:len(key)-len(s)]
		m := t.find(x)
		alias := m.canonical()
		if alias == "" {
			continue // unknown, or a name that exists only to say NODATA
		}
		if m.wild {
			// The canonical name of a wildcard match is X itself: the
			// question's own bytes up to and including the dot before
			// the search domain, so no allocation.
			alias = q.Name[:len(x)+1]
		}
		return m.answer(q.Qtype, alias)
	}
	for i := range t.zones {
		z := &t.zones[i]
		if len(key) > len(z.name) && key[len(key)-len(z.name)-1] == '.' && string(key[len(key)-len(z.name):]) == z.name {
			return Result{Action: Answer, Rcode: dns.RcodeNameError, Ns: z.soa}
		}
	}
	return Result{Action: Forward}
}

// match is what a name resolves to: a node, or part of a service's node
// for the names under it that are not stored (SRV owners).
type match struct {
	n *node // nil: no match
	// port is set for _name._proto.<service>: the service's SRV records
	// of that port.
	port []dns.RR
	// proto is set for _proto.<service>: an empty non-terminal above the
	// port names.
	proto bool
	// wild is set for a wildcard match.
	wild bool
}

// canonical is the name search-path expansion aliases to, or "" for names
// that only say NODATA.
func (m match) canonical() string {
	switch {
	case m.n == nil || m.proto:
		return ""
	case m.port != nil:
		return m.port[0].Header().Name
	}
	return m.n.canonical
}

// find resolves key (lowercase, no trailing dot) by rule 1 of Lookup.
func (t *Table) find(key []byte) match {
	if n, ok := t.names[string(key)]; ok {
		return match{n: n}
	}
	if len(key) > 0 && key[0] == '_' {
		if m := t.findPort(key); m.n != nil {
			return m
		}
	}
	if t.altNs != "" {
		if n := t.findAlt(key); n != nil {
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
func (t *Table) findService(key []byte) *node {
	if n, ok := t.names[string(key)]; ok {
		return n
	}
	if t.altNs != "" {
		return t.findAlt(key)
	}
	return nil
}

// findPort resolves the SRV names of a service: _name._proto.<service> is
// the run of the service's SRV records owned by that name (New groups
// them), and _proto.<service> exists when a named port uses the protocol.
// Deriving these names from the service keeps two map entries and two
// nodes per service out of the table, and makes every alternate name and
// alt host of the service answer SRV too.
func (t *Table) findPort(key []byte) match {
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
		n := t.findService(rest[j+1:])
		if n == nil {
			return match{}
		}
		prefix := key[:i+1+j+1] // "_name._proto."
		srv := n.set(setSRV)
		lo, hi := -1, -1
		for k, rr := range srv {
			if o := rr.Header().Name; len(o) > len(prefix) && o[:len(prefix)] == string(prefix) {
				if lo < 0 {
					lo = k
				}
				hi = k + 1
			} else if lo >= 0 {
				break
			}
		}
		if lo < 0 {
			return match{}
		}
		return match{n: n, port: srv[lo:hi:hi]}
	}
	n := t.findService(rest)
	if n == nil {
		return match{}
	}
	proto := key[:i+1] // "_tcp."
	for _, rr := range n.set(setSRV) {
		o := rr.Header().Name
		if len(o) == 0 || o[0] != '_' {
			continue
		}
		if k := strings.IndexByte(o, '.'); k >= 0 && len(o) > k+1+len(proto) && o[k+1:k+1+len(proto)] == string(proto) {
			return match{n: n, proto: true}
		}
	}
	return match{}
}

// findAlt resolves a Kubernetes alternate name by appending what the
// pod's resolver would append, in resolv.conf order (<ns>.svc.<domain>,
// svc.<domain>, <domain>). Only names of Kubernetes services in the pod's
// cluster domain (node.alt) answer this way. Deriving these names here
// instead of storing them keeps the table at one entry per name.
func (t *Table) findAlt(key []byte) *node {
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
		if nd, ok := t.names[string(buf[:n])]; ok && nd.alt {
			return nd
		}
	}
	return nil
}

// answer is the Result for a question of type qtype on m.
func (m match) answer(qtype uint16, alias string) Result {
	n := m.n
	r := Result{Action: Answer, Rcode: dns.RcodeSuccess, Alias: alias}
	if n.chase {
		r.Chase = n.chaseTarget()
		return r
	}
	var ans []dns.RR
	switch {
	case m.proto:
		// An empty non-terminal: NODATA for every type.
	case m.port != nil:
		if qtype == dns.TypeSRV || qtype == dns.TypeANY {
			ans = m.port
		}
	default:
		ans = n.records(qtype)
	}
	if len(ans) == 0 {
		// NODATA (RFC 2308 section 2.2): the name exists, the type does
		// not. Never NXDOMAIN: clients ask A and AAAA in parallel and an
		// NXDOMAIN for one family would fail the other.
		r.Ns = *n.ns
		return r
	}
	r.Answer = ans
	if ans[0].Header().Rrtype == dns.TypeSRV {
		r.Extra = n.srvExtra()
	}
	return r
}

// records returns n's records of type qtype.
func (n *node) records(qtype uint16) []dns.RR {
	switch qtype {
	case dns.TypeA:
		return n.set(setA)
	case dns.TypeAAAA:
		return n.set(setAAAA)
	case dns.TypeSRV:
		return n.set(setSRV)
	case dns.TypePTR:
		return n.set(setPTR)
	case dns.TypeTXT:
		return n.set(setTXT)
	case dns.TypeSOA:
		return n.set(setSOA)
	case dns.TypeANY:
		// RFC 8482 section 4.2: answer ANY with one RRset of our choice
		// rather than everything.
		for i := range numSets {
			if s := n.set(i); len(s) > 0 {
				return s
			}
		}
	}
	return nil
}
