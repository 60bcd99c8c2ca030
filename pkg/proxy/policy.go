package proxy

import (
	"strings"

	"github.com/meshdns/meshdns/pkg/policy"
	"github.com/meshdns/meshdns/pkg/proxy/observe"
)

// Policy is a DNS egress policy as the handler enforces it: the compiled
// matcher and, by rule index, what a denial's log line and Explain say
// about the deciding rule. Immutable; a nil *Policy allows everything at
// no cost. The semantics are in docs/policy.md.
type Policy struct {
	p     *policy.Policy
	rules []ruleInfo
	// tableDefault is the compiled Config's TableDefault.
	tableDefault policy.Action
}

var _ observe.Describer = (*Policy)(nil)

type ruleInfo struct{ pattern, source string }

// NewPolicy compiles cfg (policy.New). sources, when not nil, names the
// object each rule of cfg.Rules came from (same index), for logs.
func NewPolicy(cfg policy.Config, sources []string) (*Policy, error) {
	p, err := policy.New(cfg)
	if err != nil {
		return nil, err
	}
	out := &Policy{p: p, rules: make([]ruleInfo, len(cfg.Rules)), tableDefault: cfg.TableDefault}
	for i, r := range cfg.Rules {
		out.rules[i].pattern = r.Pattern
		if i < len(sources) {
			out.rules[i].source = sources[i]
		}
	}
	return out, nil
}

// Len returns the number of rules.
func (p *Policy) Len() int { return len(p.rules) }

// unowned judges a forwarded name inside the cluster domain when the table
// is not complete for it (no Kubernetes source): d, its decision as an
// outside name, stands unless only the outside default allowed it and the
// table default denies, so such a name gets the stricter of the two
// defaults. fromTable reports that the table default decided.
func (p *Policy) unowned(name string, d policy.Decision, search []string) (_ policy.Decision, fromTable bool) {
	if d.Action == policy.Deny || d.Rule != policy.NoRule || p.tableDefault == policy.Allow {
		return d, false
	}
	return p.p.DecideSearch(name, true, search), true
}

// Describe says how p judged v, naming the deciding rule; a nil p
// describes no verdict. It makes *Policy the query log's
// observe.Describer.
func (p *Policy) Describe(v observe.Verdict) PolicyVerdict {
	if !v.Judged || p == nil {
		return PolicyVerdict{}
	}
	out := PolicyVerdict{Judged: true, Action: v.Decision.Action.String(), Mode: p.p.Mode().String(),
		Expansion: v.Decision.Expansion, Chain: v.Chain}
	out.Rule, out.Source, out.Default = p.rule(v)
	return out
}

// rule names the rule that decided v: its pattern and source, or the
// default.
func (p *Policy) rule(v observe.Verdict) (pattern, source, def string) {
	if i := int(v.Decision.Rule); i >= 0 && i < len(p.rules) {
		return p.rules[i].pattern, p.rules[i].source, ""
	}
	// A chain target and an expansion are judged as outside names.
	if v.FromTable && v.Chain == "" && !v.Decision.Expansion {
		return "", "", "table_default"
	}
	return "", "", "outside_default"
}

// allowsZone reports whether p allows every name inside zone (lowercase,
// no trailing dot) that the table answers, whatever the name: the table
// default allows, and no rule's pattern lies inside the domain (an exact
// name or a wildcard's domain at or below it) nor is a wildcard of a
// domain above it ("*.local"). Then Decide finds no rule for such a name
// and the table default decides (as itself, a table name, under
// DecideSearch), so judge can skip the decision.
func (p *Policy) allowsZone(zone string) bool {
	if p.tableDefault != policy.Allow {
		return false
	}
	for _, r := range p.rules {
		name, wild, err := policy.ParsePattern(r.pattern)
		if err != nil || below(name, zone) || wild && below(zone, name) {
			return false
		}
	}
	return true
}

// below reports whether name is domain or a name under it (lowercase,
// no trailing dots).
func below(name, domain string) bool {
	return name == domain || strings.HasSuffix(name, "."+domain)
}
