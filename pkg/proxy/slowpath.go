package proxy

import (
	"context"
	"log/slog"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/proxy/observe"
)

// canonicalize handles the legal but unusual packets the fast parser
// leaves alone (a compressed question name, records in the answer or
// authority section, extra additional records such as TSIG): miekg unpacks
// r.Pkt, and r is parsed again from a canonical query (header, plain
// question, OPT). false means FORMERR; r then has no question to echo.
func (h *Handler) canonicalize(r *request) bool {
	id, flags := r.ID, r.Flags
	m := new(dns.Msg)
	if err := m.Unpack(r.Pkt); err == nil && len(m.Question) == 1 {
		c := &dns.Msg{MsgHdr: m.MsgHdr, Question: m.Question}
		ok := true
		for _, rr := range m.Extra {
			opt, isOPT := rr.(*dns.OPT)
			if !isOPT {
				continue
			}
			// RFC 6891 6.1.1: one OPT at most, owned by the root.
			if len(c.Extra) > 0 || opt.Hdr.Name != "." {
				ok = false
				break
			}
			c.Extra = []dns.RR{opt}
		}
		if buf, err := c.Pack(); ok && err == nil && dnswire.ParseQuery(buf, &r.Query) == dnswire.ParseOK {
			return true
		}
	}
	r.ID, r.Flags, r.QEnd, r.NameEnd, r.EDNS = id, flags, 0, 0, false
	return false
}

// chase answers an ExternalName whose CNAME chain leaves the table: the
// chain from the table, then the records of the last target resolved
// upstream, in one reply so the client needs one round trip (the Result
// contract, step 4).
func (h *Handler) chase(ctx context.Context, dst []byte, r *request) []byte {
	res := *r.chase
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
		if r.pol != nil && h.judgeTarget(r, target, nil) {
			return h.deny(dst, r)
		}
		up, s, err := h.resolver.Exchange(ctx, dns.Question{Name: target, Qtype: r.QType, Qclass: r.QClass})
		if err != nil {
			rcode := dns.RcodeServerFailure
			if isOverloaded(err) {
				rcode = dns.RcodeRefused
			}
			r.upErr = err
			if h.log.Enabled(ctx, slog.LevelDebug) {
				h.log.DebugContext(ctx, "chase failed", "qname", target, "qtype", dns.Type(r.QType), "err", err)
			}
			return h.local(dst, r, rcode, observe.SourceUpstream)
		}
		if r.pol != nil && h.judgeTarget(r, target, up.Answer) {
			return h.deny(dst, r)
		}
		src = resolverSource(s)
		m.Rcode = up.Rcode
		m.Answer = append(m.Answer, up.Answer...)
		m.Ns = up.Ns
	}
	out, err := m.PackBuffer(dst[:0])
	if err != nil {
		h.log.Error("pack chased answer", "qname", qname, "qtype", dns.Type(r.QType), "err", err)
		return h.local(dst, r, dns.RcodeServerFailure, observe.SourceTable)
	}
	patchReply(out, r)
	out = h.finish(out, r)
	h.observe(ctx, r, m.Rcode, src, out)
	return out
}
