package policy

// Meant maps a name the pod's resolver built from its search path back to
// the name the pod meant: when qname is X.S for a search domain S (the
// longest that fits, any case, trailing dots optional) and X is not empty,
// it returns X and true. It allocates nothing: X is a prefix of qname.
//
// A resolver cannot tell an expansion from a name asked as written, and
// neither can the agent: web.corp.example may be "web" under search domain
// corp.example or the full name. DecideSearch says how both are judged.
func Meant(qname string, search []string) (string, bool) {
	q := trimDot(qname)
	best := -1
	for _, s := range search {
		s = trimDot(s)
		// X.S: at least one character of X, the dot, then S.
		if s == "" || len(q) < len(s)+2 || len(s) <= best {
			continue
		}
		cut := len(q) - len(s)
		if q[cut-1] == '.' && boundary(q, cut-1) && equalName(q[cut:], s) {
			best = len(s)
		}
	}
	if best < 0 {
		return "", false
	}
	return q[:len(q)-best-1], true
}

// DecideSearch is Decide for a pod whose resolver walks the search list
// search. A name is forwarded only when the name as written is allowed:
// the pod writes its own search list, so a search domain says nothing
// about where a name's query goes, and judging X.<search domain> as X
// would send data to a domain no rule allows (X.wild.example.evil.test
// under "*.wild.example"). What the pod meant may only add a denial:
//
//   - A name no search domain fits is judged by Decide.
//   - A name answered from the table is judged as itself: the table holds
//     it or answers its NXDOMAIN, and nothing leaves the pod.
//   - A forwarded name is judged as written first. A rule about it
//     decides; without one the outside default does. When only the
//     outside default allows it, the name the pod meant (Meant, as an
//     outside name) is judged too and its denial wins (Expansion set):
//     with "evil.com" denied, evil.com.corp.example is denied as well, so
//     a denied name is denied at every step of the walk.
//   - A denied name under a search domain is answered NXDOMAIN, whatever
//     DenyResponse says: REFUSED would stop musl's walk before it reaches
//     the name as written, which then gets the policy's response.
//
// It allocates nothing.
func (p *Policy) DecideSearch(qname string, fromTable bool, search []string) Decision {
	d := p.Decide(qname, fromTable)
	meant, ok := Meant(qname, search)
	if p == nil || !ok {
		return d
	}
	if !fromTable && d.Rule == NoRule && d.Action == Allow {
		if m := p.Decide(meant, false); m.Action == Deny {
			d = m
			d.Expansion = true
		}
	}
	if d.Action == Deny {
		d.Rcode = rcodeNXDOMAIN
	}
	return d
}
