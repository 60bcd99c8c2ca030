package proxy

import (
	"context"
	"errors"
	"log/slog"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/proxy/observe"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// decide is the decide stage for a query the reader may answer without
// blocking: the table (its answer cache, then Lookup), the policy, then
// the Resolver's cache. It settles d on a reply, a made-up reply or a
// wait (resolve); a reply it finds is appended to dst[:0].
func (h *decider) decide(dst []byte, r *request, d *decision) {
	// One load gives the table and the policy of one version.
	st := h.state.Load()
	d.pol, d.zoneAllowed, d.ownsCluster = st.pol, st.zoneAllowed, st.ownsCluster
	switch {
	case r.QClass != dnswire.ClassIN:
		// CHAOS and friends are not ours; the upstream may know them.
		h.fromCache(dst, r, d)
		return
	case st.table == nil:
		if dnswire.InZone(r.LName(), h.zone) {
			d.madeUp(dns.RcodeServerFailure, observe.SourceTable)
			return
		}
		h.fromCache(dst, r, d)
		return
	}
	key := r.QKey()
	out, kind, rcode, chase := st.appendCached(dst[:0], key)
	if kind == kindMiss {
		var err error
		if out, kind, rcode, chase, err = st.build(dst[:0], key, r); err != nil {
			h.log.Error("pack table answer", "qname", wireName(r.Name()), "qtype", dns.Type(r.QType), "err", err)
			d.madeUp(dns.RcodeServerFailure, observe.SourceTable)
			return
		}
	}
	if kind != kindForward && d.pol != nil && h.judge(r, d, true) {
		deny(d)
		return
	}
	switch kind {
	case kindForward:
		h.fromCache(dst, r, d)
	case kindChase:
		d.act, d.chase = actWait, chase
	default:
		d.reply(out, rcode, observe.SourceTable)
	}
}

// fromCache settles d from the Resolver's cache, or on a wait.
func (h *decider) fromCache(dst []byte, r *request, d *decision) {
	// A denied name is never asked upstream nor answered from the cache.
	if d.pol != nil && h.judge(r, d, false) {
		deny(d)
		return
	}
	out, s, ok := h.resolver.AppendCached(dst[:0], r.QWire(), r.QKey(), &d.probe)
	if !ok || len(out) < r.QEnd {
		d.act = actWait
		return
	}
	h.forwarded(out, r, d, s)
}

// decideWait is the decide stage for a query that waits: it chases the
// ExternalName, or asks the Resolver about the cache miss decide saw. It
// may block.
func (h *decider) decideWait(ctx context.Context, dst []byte, r *request, d *decision) {
	if d.chase != nil {
		h.chase(ctx, dst, r, d)
		return
	}
	d.Upstream = ""
	if h.obs.Tapping() {
		d.probe.Record()
	}
	out, s, err := h.resolver.Resolve(ctx, dst[:0], r.QWire(), r.QKey(), &d.probe)
	if err != nil || len(out) < r.QEnd {
		rcode := dns.RcodeServerFailure
		if isOverloaded(err) {
			rcode = dns.RcodeRefused
		}
		d.UpErr = errOr(err, errShortReply)
		if h.log.Enabled(ctx, slog.LevelDebug) {
			h.log.DebugContext(ctx, "forward failed", "qname", wireName(r.Name()), "qtype", dns.Type(r.QType), "err", err)
		}
		d.madeUp(rcode, observe.SourceUpstream)
		return
	}
	d.Upstream = d.probe.Upstream()
	h.forwarded(out, r, d, s)
}

// forwarded settles d on a reply from the Resolver, unless its CNAME chain
// leads to a denied name.
func (h *decider) forwarded(out []byte, r *request, d *decision, s upstream.Source) {
	if d.pol != nil && judgeChain(out, r, d) {
		deny(d)
		return
	}
	d.reply(out, int(out[3]&dnswire.RcodeMask), resolverSource(s))
}

// errShortReply stands for a Resolver reply too short to hold the question.
var errShortReply = errors.New("reply shorter than its question")

func errOr(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}
