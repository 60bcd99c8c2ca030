package proxy

import (
	"context"
	"encoding/binary"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/proxy/observe"
)

// send is the reply stage: it builds the reply q's decision settled on,
// in dst's storage (a found reply is already there), for the client of
// q's request: a found reply patched and finished, or one the proxy makes
// up. Then it hands the outcome to the observer, the last stage.
func send(ctx context.Context, obs *observe.Observer, dst []byte, q *query) []byte {
	r, d := &q.req, &q.dec
	var out []byte
	truncated := false
	if d.act == actMadeUp {
		out = madeUp(dst, r, d.Rcode)
	} else {
		patchReply(d.out, r)
		out, truncated = finish(d.out, r)
	}
	oc := &d.Outcome
	oc.Query, oc.Protocol, oc.Reply, oc.Truncated = &r.Query, r.proto, out, truncated
	oc.Probe, oc.Addrs = &d.probe, &r.addrs
	if d.pol != nil {
		oc.Policy = d.pol
	}
	obs.Observe(ctx, oc)
	return out
}

// patchReply makes a stored reply (ID 0, lowercase question) answer r: the
// client's ID, RD and CD bits, and its question bytes, so owner names
// compressed to offset 12 echo the client's spelling.
func patchReply(out []byte, r *request) {
	binary.BigEndian.PutUint16(out[0:], r.ID)
	flags := binary.BigEndian.Uint16(out[2:])&^(dnswire.FlagRD|dnswire.FlagCD) | r.Flags&(dnswire.FlagRD|dnswire.FlagCD)
	binary.BigEndian.PutUint16(out[2:], flags)
	copy(out[dnswire.HeaderLen:], r.QWire())
}

// madeUp writes a reply the proxy makes up itself: header, the question
// when r has one, and OPT when the client sent one. RA, RD, CD and AD are
// defined for QUERY only: a reply to another opcode (NOTIMP, from us or
// through the slow path) has them all clear (AD is never set here), so
// it does not claim recursion for an operation we do not implement.
func madeUp(dst []byte, r *request, rcode int) []byte {
	out := dst[:0]
	flags := dnswire.FlagQR | r.Flags&dnswire.MaskOp | uint16(rcode&dnswire.RcodeMask)
	if r.Opcode() == dns.OpcodeQuery {
		flags |= dnswire.FlagRA | r.Flags&(dnswire.FlagRD|dnswire.FlagCD)
	}
	var qd byte
	if r.QEnd > 0 {
		qd = 1
	}
	out = append(out, byte(r.ID>>8), byte(r.ID), byte(flags>>8), byte(flags), 0, qd, 0, 0, 0, 0, 0, 0)
	if r.QEnd > 0 {
		out = append(out, r.QWire()...)
	}
	if r.EDNS {
		out = dnswire.AppendReplyOPT(out, rcode, r.DO)
	}
	return out
}

// finish truncates a reply to what the client takes and adds our OPT.
func finish(out []byte, r *request) (_ []byte, truncated bool) {
	limit := dns.MaxMsgSize
	if r.proto == UDP {
		limit = r.UDPSize
	}
	if r.EDNS {
		limit -= dnswire.OPTLen
	}
	if len(out) > limit {
		out, truncated = dnswire.Truncate(out, limit), true
	}
	if r.EDNS {
		out = dnswire.AppendReplyOPT(out, int(out[3]&dnswire.RcodeMask), r.DO)
	}
	return out, truncated
}
