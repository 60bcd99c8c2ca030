package proxy

import (
	"strings"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
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

// SetTablePolicy makes t the table and p the policy answers come from, in
// one atomic store: no query sees the new names under the old policy or
// the reverse. A nil p turns the policy off. SetTable keeps the policy
// being enforced.
func (h *Handler) SetTablePolicy(t Lookuper, p *Policy) {
	st := newTableState(t, h.maxAnswers, h.maxAnswerBytes)
	st.pol, st.zoneAllowed = p, h.zoneAllowed(p)
	st.ownsCluster = p != nil && h.ownsCluster(t)
	h.state.Store(st)
	h.ready.Store(t != nil)
}

// Policy returns the policy being enforced, or nil.
func (h *Handler) Policy() *Policy { return h.state.Load().pol }

// SetTablePolicy swaps the table and the policy; see
// Handler.SetTablePolicy.
func (s *Server) SetTablePolicy(t Lookuper, p *Policy) { s.h.SetTablePolicy(t, p) }

// judge decides r's question name under r.pol and reports whether the
// query must be answered with the denial (h.deny) instead of resolved.
// fromTable says the table answers the name. A name inside the cluster
// domain that the table forwards (pod records sent to the cluster DNS)
// counts as a table name only when the table is complete for the cluster
// domain (ownsCluster): then the upstream is the cluster DNS, which answers
// it itself, and TableDefault keeps all of cluster DNS working. Otherwise
// nobody the agent knows answers it: it is an outside name, and a
// TableDefault that denies denies it too (unowned). A name under a search
// domain is forwarded only when allowed as written (policy.DecideSearch).
// It allocates nothing for names without bytes that need escaping.
func (h *Handler) judge(r *request, fromTable bool) bool {
	cluster := dnswire.InZone(r.LName(), h.zone)
	if cluster && (fromTable || r.ownsCluster) {
		if r.zoneAllowed {
			// What Decide would say, without its probes: the common
			// case of a policy about outside names only.
			r.verdict = observe.Verdict{Judged: true, FromTable: true,
				Decision: policy.Decision{Action: policy.Allow, Rule: policy.NoRule, Audit: r.pol.p.Mode() == policy.Audit}}
			return false
		}
		fromTable = true
	}
	var buf [dnswire.MaxNameLen + 1]byte
	name := dnswire.String(dnswire.AppendPresentation(buf[:0], r.LName()))
	d := r.pol.p.DecideSearch(name, fromTable, h.search)
	if cluster && !fromTable {
		d, fromTable = r.pol.unowned(name, d, h.search)
	}
	r.verdict = observe.Verdict{Judged: true, FromTable: fromTable, Decision: d}
	return d.Blocks()
}

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

// ownsCluster reports whether the table t is complete for the cluster
// domain: one of its zones (nametable.Table.Zones) is the cluster domain
// or above it. A control plane with a Kubernetes source sends the cluster
// domain as a zone (unless --fallthrough); a file-only or VM control plane
// does not. A Lookuper that does not say its zones owns none.
func (h *Handler) ownsCluster(t Lookuper) bool {
	z, ok := t.(interface{ Zones() []string })
	if !ok {
		return false
	}
	zone := strings.TrimSuffix(wireName(h.zone), ".")
	for _, s := range z.Zones() {
		if below(zone, strings.ToLower(strings.TrimSuffix(s, "."))) {
			return true
		}
	}
	return false
}

// deny answers r with the policy's response: NXDOMAIN or REFUSED, made up
// by the proxy, nothing asked upstream and nothing cached.
func (h *Handler) deny(dst []byte, r *request) []byte {
	return h.local(dst, r, int(r.verdict.Decision.Rcode), observe.SourceLocal)
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

// judgeTarget judges the target of an ExternalName the table chases
// upstream, and the CNAME chain of the answer from there (nil before
// asking), as a forwarded answer's chain: every name must be allowed. A
// denied name replaces r's verdict; judgeTarget reports whether it blocks.
func (h *Handler) judgeTarget(r *request, target string, answer []dns.RR) bool {
	d, name := r.pol.p.DecideChain(target, answer)
	if d.Action != policy.Deny {
		return false
	}
	r.verdict.Decision, r.verdict.Chain = d, name
	return d.Blocks()
}

// zoneAllowed reports whether p allows every name inside the cluster
// domain that the table answers, whatever the name, so judge can skip the
// decision for them: the table default allows, and no rule's pattern lies
// inside the domain (an exact name or a wildcard's domain at or below it)
// nor is a wildcard of a domain above it ("*.local"). Then Decide finds no
// rule for such a name and the table default decides (as itself, a table
// name, under DecideSearch). Remembered for the last policy set.
func (h *Handler) zoneAllowed(p *Policy) bool {
	if p == nil || p.tableDefault != policy.Allow {
		return false
	}
	h.zoneMemo.Lock()
	defer h.zoneMemo.Unlock()
	if h.zoneMemo.p == p {
		return h.zoneMemo.allowed
	}
	zone := strings.TrimSuffix(wireName(h.zone), ".")
	allowed := true
	for _, r := range p.rules {
		name, wild, err := policy.ParsePattern(r.pattern)
		if err != nil || below(name, zone) || wild && below(zone, name) {
			allowed = false
			break
		}
	}
	h.zoneMemo.p, h.zoneMemo.allowed = p, allowed
	return allowed
}

// below reports whether name is domain or a name under it (lowercase,
// no trailing dots).
func below(name, domain string) bool {
	return name == domain || strings.HasSuffix(name, "."+domain)
}
