package proxy

import (
	"context"
	"log/slog"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/proxy/observe"
)

// chase settles d on the answer to an ExternalName whose CNAME chain
// leaves the table: the chain from the table, then the records of the last
// target resolved upstream, in one reply so the client needs one round
// trip (the Result contract, step 4). It is part of the decide stage for a
// query that waits.
func (h *decider) chase(ctx context.Context, dst []byte, r *request, d *decision) {
	res := *d.chase
	qname := wireName(r.LName())
	m := new(dns.Msg)
	m.Response = true
	m.RecursionAvailable = true
	m.Compress = true
	m.Question = []dns.Question{{Name: qname, Qtype: r.QType, Qclass: r.QClass}}
	m.Answer = append(resultAnswer(res, qname), res.Chain...)
	target := dns.Fqdn(res.Chase)
	src := observe.SourceTable
	if r.QType != dns.TypeCNAME {
		// The target leaves the table: judged as a forwarded name.
		if d.pol != nil && judgeTarget(d, target, nil) {
			deny(d)
			return
		}
		up, s, err := h.resolver.Exchange(ctx, dns.Question{Name: target, Qtype: r.QType, Qclass: r.QClass})
		if err != nil {
			rcode := dns.RcodeServerFailure
			if isOverloaded(err) {
				rcode = dns.RcodeRefused
			}
			d.UpErr = err
			if h.log.Enabled(ctx, slog.LevelDebug) {
				h.log.DebugContext(ctx, "chase failed", "qname", target, "qtype", dns.Type(r.QType), "err", err)
			}
			d.madeUp(rcode, observe.SourceUpstream)
			return
		}
		if d.pol != nil && judgeTarget(d, target, up.Answer) {
			deny(d)
			return
		}
		src = resolverSource(s)
		m.Rcode = up.Rcode
		m.Answer = append(m.Answer, up.Answer...)
		m.Ns = up.Ns
	}
	out, err := m.PackBuffer(dst[:0])
	if err != nil {
		h.log.Error("pack chased answer", "qname", qname, "qtype", dns.Type(r.QType), "err", err)
		d.madeUp(dns.RcodeServerFailure, observe.SourceTable)
		return
	}
	d.reply(out, m.Rcode, src)
}
