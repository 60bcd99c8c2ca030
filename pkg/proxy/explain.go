package proxy

import (
	"context"
	"fmt"

	"github.com/miekg/dns"
)

// Explain answers q exactly as a client asking over TCP would be answered
// (same table, caches, Resolver and reply), and says where the reply came
// from: "table", "cache", "upstream" or "local" (made up by the proxy:
// SERVFAIL before the first table, REFUSED for lack of capacity). It is
// the debug endpoints' way to show an answer without repeating the rules.
// It does not use the UDP forwarding workers, so a debug lookup never
// takes capacity from the application's queries.
func (h *Handler) Explain(ctx context.Context, q dns.Question) (*dns.Msg, string, error) {
	m, src, _, err := h.ExplainPolicy(ctx, q)
	return m, src, err
}

// ExplainPolicy is Explain that also says how the policy judged q: which
// rule or default decided, and whether a CNAME target was denied.
func (h *Handler) ExplainPolicy(ctx context.Context, q dns.Question) (*dns.Msg, string, PolicyVerdict, error) {
	m := new(dns.Msg)
	m.Question = []dns.Question{q}
	m.RecursionDesired = true
	m.SetEdns0(dns.MaxMsgSize, false)
	pkt, err := m.Pack()
	if err != nil {
		return nil, "", PolicyVerdict{}, fmt.Errorf("explain %s: %w", q.Name, err)
	}
	var x query
	reply, wait := h.answer(nil, pkt, TCP, &x)
	if wait {
		reply = h.resolve(ctx, nil, &x)
	}
	pv := x.dec.pol.Describe(x.dec.Verdict)
	if reply == nil {
		return nil, "", pv, fmt.Errorf("explain %s: no reply", q.Name)
	}
	out := new(dns.Msg)
	if err := out.Unpack(reply); err != nil {
		return nil, "", pv, fmt.Errorf("explain %s: %w", q.Name, err)
	}
	return out, x.dec.Source.String(), pv, nil
}
