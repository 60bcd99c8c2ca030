package nametable

import "github.com/miekg/dns"

// Lookup answers q. The question name may be in any case, with or without
// the trailing dot. Lookup allocates nothing: the name is lowercased into
// a stack buffer, m[string(bytes)] map lookups do not copy, and every
// returned slice is precomputed and shared.
//
// The order of the rules (DESIGN.md section 4):
//  1. the name itself: a stored name, a Kubernetes alternate name
//     (svc, svc.ns, svc.ns.svc), or the most specific wildcard;
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
	if n, _ := t.find(key); n != nil {
		return n.answer(q.Qtype, "")
	}
	for _, s := range t.search {
		if len(key) <= len(s) || string(key[len(key)-len(s):]) != s {
			continue
		}
		x := key[:len(key)-len(s)]
		n, wild := t.find(x)
		if n == nil || n.canonical == "" {
			continue // unknown, or a name that exists only to say NODATA
		}
		alias := n.canonical
		if wild {
			// The canonical name of a wildcard match is X itself: the
			// question's own bytes up to and including the dot before
			// the search domain, so no allocation.
			alias = q.Name[:len(x)+1]
		}
		return n.answer(q.Qtype, alias)
	}
	for i := range t.zones {
		z := &t.zones[i]
		if len(key) > len(z.name) && key[len(key)-len(z.name)-1] == '.' && string(key[len(key)-len(z.name):]) == z.name {
			return Result{Action: Answer, Rcode: dns.RcodeNameError, Ns: z.soa}
		}
	}
	return Result{Action: Forward}
}

// find returns the node answering for key (lowercase, no trailing dot):
// the stored name, a Kubernetes alternate name, or the most specific
// wildcard (wild is then true).
func (t *Table) find(key []byte) (n *node, wild bool) {
	if n, ok := t.names[string(key)]; ok {
		return n, false
	}
	if t.altNs != "" {
		if n := t.findAlt(key); n != nil {
			return n, false
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
				return n, true
			}
		}
	}
	return nil, false
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

// answer is the Result for a question of type qtype on n.
func (n *node) answer(qtype uint16, alias string) Result {
	r := Result{Action: Answer, Rcode: dns.RcodeSuccess, Alias: alias}
	if n.chase {
		r.Chase = n.chaseTarget()
		return r
	}
	var ans []dns.RR
	switch qtype {
	case dns.TypeA:
		ans = n.set(setA)
	case dns.TypeAAAA:
		ans = n.set(setAAAA)
	case dns.TypeSRV:
		ans = n.set(setSRV)
		if len(ans) > 0 && n.extra != nil {
			r.Extra = *n.extra
		}
	case dns.TypePTR:
		ans = n.set(setPTR)
	case dns.TypeTXT:
		ans = n.set(setTXT)
	case dns.TypeSOA:
		ans = n.set(setSOA)
	case dns.TypeANY:
		// RFC 8482 section 4.2: answer ANY with one RRset of our choice
		// rather than everything.
		for i := range numSets {
			if ans = n.set(i); len(ans) > 0 {
				break
			}
		}
	}
	if len(ans) == 0 {
		// NODATA (RFC 2308 section 2.2): the name exists, the type does
		// not. Never NXDOMAIN: clients ask A and AAAA in parallel and an
		// NXDOMAIN for one family would fail the other.
		r.Ns = *n.ns
		return r
	}
	r.Answer = ans
	return r
}
