package policy

import "github.com/miekg/dns"

// maxChain bounds the CNAME links followed, as a stub resolver does; a
// longer chain or a loop ends the walk (the names judged so far decided).
const maxChain = 16

// DecideChain judges a forwarded answer to qname. Every name of the CNAME
// chain must be allowed: the query name and each CNAME target reached from
// it, in order (qname -> target1 -> target2 ...), each judged as an outside
// name. It returns the decision of the first denied name and that name, or,
// when all are allowed, the query name's decision and qname. Records of the
// answer that are not on the chain (the final A/AAAA records are owned by
// the last name, already judged) are not names the pod is led to.
//
// So "*.s3.amazonaws.com" allowed and everything else denied rejects an
// answer in which bucket.s3.amazonaws.com is a CNAME to s3-1-w.amazonaws.com:
// allowing the chain's targets is the policy writer's job. DecideChain
// allocates nothing.
func (p *Policy) DecideChain(qname string, answer []dns.RR) (Decision, string) {
	first := p.Decide(qname, false)
	if p == nil || first.Action == Deny {
		return first, qname
	}
	cur := qname
	for range maxChain {
		next, found := "", false
		for _, rr := range answer {
			c, ok := rr.(*dns.CNAME)
			if ok && equalName(c.Hdr.Name, cur) {
				next, found = c.Target, true
				break
			}
		}
		if !found {
			break
		}
		if next == "" {
			// A CNAME without data (miekg leaves its target empty) is
			// judged as the root, an outside name: the default for
			// outside names decides.
			next = "."
		}
		if d := p.Decide(next, false); d.Action == Deny {
			return d, next
		}
		cur = next
	}
	return first, qname
}

// equalName compares two names ignoring ASCII case and a trailing dot.
func equalName(a, b string) bool {
	a, b = trimDot(a), trimDot(b)
	if len(a) != len(b) {
		return false
	}
	for i := 0; i < len(a); i++ {
		if lower(a[i]) != lower(b[i]) {
			return false
		}
	}
	return true
}

func trimDot(s string) string {
	if n := len(s); n > 0 && s[n-1] == '.' && boundary(s, n-1) {
		return s[:n-1]
	}
	return s
}

func lower(c byte) byte {
	if c >= 'A' && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}
