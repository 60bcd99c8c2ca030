package policy

import "github.com/miekg/dns"

const rcodeNXDOMAIN = dns.RcodeNameError

// NoRule is Decision.Rule when a default decided.
const NoRule = -1

// Decision is the policy's verdict on one name.
type Decision struct {
	Action Action
	// Rule is the index in Config.Rules of the deciding rule, or NoRule
	// when OutsideDefault or TableDefault decided.
	Rule int32
	// Rcode is what to answer when Action is Deny: dns.RcodeNameError
	// or dns.RcodeRefused. 0 when allowed.
	Rcode uint16
	// Audit is set when the policy only reports: the caller answers as
	// if allowed and counts the denial.
	Audit bool
	// Expansion is set when the name the pod meant under its search
	// path denied a name its default allowed as written (DecideSearch).
	Expansion bool
}

// Blocks reports whether the caller must answer the denial instead of
// resolving the name: denied and not in audit mode.
func (d Decision) Blocks() bool { return d.Action == Deny && !d.Audit }

// Decide judges qname, a name in presentation form as miekg/dns writes it
// (any case, trailing dot optional, special characters escaped). fromTable
// says whether the agent answers it from its table (then TableDefault
// applies when no rule matches) or would forward it (OutsideDefault).
//
// Precedence, the most specific match first:
//  1. an exact rule for the name;
//  2. the wildcard rule of the longest domain the name lies strictly
//     below ("*.a.example.com" before "*.example.com");
//  3. the default for where the answer comes from.
//
// Rules of the same pattern with both actions deny (see New). Decide
// allocates nothing. A nil *Policy allows every name.
func (p *Policy) Decide(qname string, fromTable bool) Decision {
	if p == nil {
		return Decision{Action: Allow, Rule: NoRule}
	}
	return decide(p, qname, fromTable)
}

// DecideBytes is Decide for a name held in a byte slice.
func (p *Policy) DecideBytes(qname []byte, fromTable bool) Decision {
	if p == nil {
		return Decision{Action: Allow, Rule: NoRule}
	}
	return decide(p, qname, fromTable)
}

func decide[N string | []byte](p *Policy, qname N, fromTable bool) Decision {
	rule, ok := match(p, qname)
	action := p.outside
	if fromTable {
		action = p.table
	}
	if ok {
		action = p.ruleAction(rule)
	} else {
		rule = NoRule
	}
	return p.verdict(action, rule)
}

func (p *Policy) verdict(action Action, rule int32) Decision {
	d := Decision{Action: action, Rule: rule, Audit: p.mode == Audit}
	if action == Deny {
		d.Rcode = dns.RcodeNameError
		if p.response == Refused {
			d.Rcode = dns.RcodeRefused
		}
	}
	return d
}
