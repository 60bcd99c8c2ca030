package proxy

import (
	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/policy"
)

// judgeChain judges the CNAME chain of a forwarded reply to r, as
// policy.DecideChain does on a dns.Msg: from the question name (judged
// already), each target reached by following the CNAME whose owner is
// the current name, at most maxChainLinks, each as an outside name. The
// first denied target decides: it replaces r's verdict and judgeChain
// reports whether it blocks. Records off the chain are not judged. The
// walk is in wire form (dnswire), so it allocates nothing.
func (h *Handler) judgeChain(msg []byte, r *request) bool {
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
		if d := r.pol.p.DecideBytes(name, false); d.Action == policy.Deny {
			r.verdict.Decision, r.verdict.Chain = d, string(name)
			return d.Blocks()
		}
		cur = append(curBuf[:0], target...)
	}
	return false
}

// maxChainLinks bounds the CNAME links followed, as pkg/policy does.
const maxChainLinks = 16
