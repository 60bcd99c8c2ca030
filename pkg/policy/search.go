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
// search, so that the walk is never denied along the way:
//
//   - A name no search domain fits is judged by Decide.
//   - A name answered from the table is judged as itself (the table holds
//     it or answers its NXDOMAIN), and so is a name a rule matches: a rule
//     about the name as written beats what it may have meant.
//   - Otherwise (a forwarded name that only a default decides) it is judged
//     as the name the pod meant (Meant, as an outside name) and the
//     decision has Expansion set: api.stripe.com.corp.example is allowed
//     when api.stripe.com is, and denied when api.stripe.com is.
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
	if !fromTable && d.Rule == NoRule {
		d = p.Decide(meant, false)
		d.Expansion = true
	}
	if d.Action == Deny {
		d.Rcode = rcodeNXDOMAIN
	}
	return d
}
