package proxy

import (
	"context"
	"log/slog"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/nametable"
)

// serveSlow handles the legal but unusual packets the fast parser leaves
// alone (a compressed question name, records in the answer or authority
// section, extra additional records such as TSIG): miekg unpacks it, and a
// canonical query (header, plain question, OPT) goes down the normal path.
func (h *Handler) serveSlow(ctx context.Context, dst, pkt []byte, p Protocol, block bool, start time.Duration) ([]byte, bool) {
	var q query
	parseQuery(pkt, &q) // fills the ID and flags for a FORMERR
	m := new(dns.Msg)
	if err := m.Unpack(pkt); err != nil || len(m.Question) != 1 {
		return h.local(dst, &query{id: q.id, flags: q.flags}, p, dns.RcodeFormatError, false, srcLocal, start), false
	}
	c := &dns.Msg{MsgHdr: m.MsgHdr, Question: m.Question}
	for _, rr := range m.Extra {
		opt, ok := rr.(*dns.OPT)
		if !ok {
			continue
		}
		// RFC 6891 6.1.1: one OPT at most, owned by the root.
		if len(c.Extra) > 0 || opt.Hdr.Name != "." {
			return h.local(dst, &query{id: q.id, flags: q.flags}, p, dns.RcodeFormatError, false, srcLocal, start), false
		}
		c.Extra = []dns.RR{opt}
	}
	buf, err := c.Pack()
	if err == nil && parseQuery(buf, &q) == parseOK {
		return h.serveQuery(ctx, dst, &q, p, block, start)
	}
	return h.local(dst, &query{id: q.id, flags: q.flags}, p, dns.RcodeFormatError, false, srcLocal, start), false
}

// chase answers an ExternalName: the CNAME chain from the table, then the
// target's records of the asked type resolved upstream, in one reply so
// the client needs one round trip (Result contract step 3).
func (h *Handler) chase(ctx context.Context, dst []byte, q *query, res nametable.Result, p Protocol, start time.Duration) []byte {
	if start == 0 {
		start = h.clock()
	}
	qname := strings.ToLower(wireName(q.name))
	m := new(dns.Msg)
	m.Response = true
	m.RecursionAvailable = true
	m.Compress = true
	m.Question = []dns.Question{{Name: qname, Qtype: q.qtype, Qclass: q.qclass}}
	m.Answer = resultAnswer(res, qname)
	owner := qname
	if res.Alias != "" {
		owner = strings.ToLower(dns.Fqdn(res.Alias))
	}
	target := dns.Fqdn(res.Chase)
	m.Answer = append(m.Answer, &dns.CNAME{
		Hdr:    dns.RR_Header{Name: owner, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: aliasTTL(res)},
		Target: target,
	})
	src := srcTable
	if q.qtype != dns.TypeCNAME {
		r, s, err := h.resolver.Exchange(ctx, dns.Question{Name: target, Qtype: q.qtype, Qclass: q.qclass})
		if err != nil {
			rcode := dns.RcodeServerFailure
			if isOverloaded(err) {
				rcode = dns.RcodeRefused
			}
			if h.log.Enabled(ctx, slog.LevelDebug) {
				h.log.DebugContext(ctx, "chase failed", "qname", target, "qtype", dns.Type(q.qtype), "err", err)
			}
			return h.local(dst, q, p, rcode, true, srcUpstream, start)
		}
		src = resolverSource(s)
		m.Rcode = r.Rcode
		m.Answer = append(m.Answer, r.Answer...)
		m.Ns = r.Ns
	}
	out, err := m.PackBuffer(dst[:0])
	if err != nil {
		h.log.Error("pack chased answer", "qname", qname, "qtype", dns.Type(q.qtype), "err", err)
		return h.local(dst, q, p, dns.RcodeServerFailure, true, srcTable, start)
	}
	patchReply(out, q)
	out = h.finish(out, q, p)
	h.observe(ctx, q, p, m.Rcode, src, start)
	return out
}
