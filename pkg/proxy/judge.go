package proxy

import (
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/policy"
	"github.com/meshdns/meshdns/pkg/proxy/observe"
)

// The decide stage's DNS policy checks: each notes its verdict in the
// query's decision; deny settles the decision on the policy's answer.

// judge decides r's question name under d.pol, noting the verdict in d, and reports whether the
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
func (h *decider) judge(r *request, d *decision, fromTable bool) bool {
	cluster := dnswire.InZone(r.LName(), h.zone)
	if cluster && (fromTable || d.ownsCluster) {
		if d.zoneAllowed {
			// What Decide would say, without its probes: the common
			// case of a policy about outside names only.
			d.Verdict = observe.Verdict{Judged: true, FromTable: true,
				Decision: policy.Decision{Action: policy.Allow, Rule: policy.NoRule, Audit: d.pol.p.Mode() == policy.Audit}}
			return false
		}
		fromTable = true
	}
	var buf [dnswire.MaxNameLen + 1]byte
	name := dnswire.String(dnswire.AppendPresentation(buf[:0], r.LName()))
	dec := d.pol.p.DecideSearch(name, fromTable, h.search)
	if cluster && !fromTable {
		dec, fromTable = d.pol.unowned(name, dec, h.search)
	}
	d.Verdict = observe.Verdict{Judged: true, FromTable: fromTable, Decision: dec}
	return dec.Blocks()
}

// judgeTarget judges the target of an ExternalName the table chases
// upstream, and the CNAME chain of the answer from there (nil before
// asking), as a forwarded answer's chain: every name must be allowed. A
// denied name replaces d's verdict; judgeTarget reports whether it blocks.
func judgeTarget(d *decision, target string, answer []dns.RR) bool {
	dec, name := d.pol.p.DecideChain(target, answer)
	if dec.Action != policy.Deny {
		return false
	}
	d.Verdict.Decision, d.Verdict.Chain = dec, name
	return dec.Blocks()
}

// deny settles d on the policy's response: NXDOMAIN or REFUSED, made up
// by the proxy, nothing asked upstream and nothing cached.
func deny(d *decision) { d.madeUp(int(d.Verdict.Decision.Rcode), observe.SourceLocal) }

// judgeChain judges the CNAME chain of a forwarded reply to r, as
// policy.DecideChain does on a dns.Msg: from the question name (judged
// already), each target reached by following the CNAME whose owner is
// the current name, at most maxChainLinks, each as an outside name. The
// first denied target decides: it replaces d's verdict and judgeChain
// reports whether it blocks. Records off the chain are not judged. The
// walk is in wire form (dnswire), so it allocates nothing.
func judgeChain(msg []byte, r *request, d *decision) bool {
	if !dnswire.HasCNAME(msg, r.QEnd) {
		return false
	}
	var curBuf, tgtBuf, pbuf [dnswire.MaxNameLen + 1]byte
	cur := append(curBuf[:0], r.LName()...)
	for range maxChainLinks {
		// A target that is not exactly the record's data is judged as
		// the root, an outside name, so the default for outside names
		// decides, as pkg/policy does for miekg's empty one.
		target := dnswire.CNAMETarget(tgtBuf[:0], msg, r.QEnd, cur)
		if target == nil {
			return false
		}
		name := dnswire.AppendPresentation(pbuf[:0], target)
		if dec := d.pol.p.DecideBytes(name, false); dec.Action == policy.Deny {
			d.Verdict.Decision, d.Verdict.Chain = dec, string(name)
			return dec.Blocks()
		}
		cur = append(curBuf[:0], target...)
	}
	return false
}

// maxChainLinks bounds the CNAME links followed, as pkg/policy does.
const maxChainLinks = 16
