package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/proxy/observe"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// Handler turns one query packet into one reply packet. It is safe for
// concurrent use; the listeners of a Server share one, and benchmarks call
// it directly.
type Handler struct {
	resolver Resolver
	log      *slog.Logger
	// obs counts, times and logs each query's outcome (pkg/proxy/observe).
	obs *observe.Observer
	// zone is the cluster domain in lowercased wire form.
	zone                       []byte
	maxAnswers, maxAnswerBytes int
	// state is the current table with its answer cache; never nil. Each
	// query loads it once, so a swap never waits for queries.
	state atomic.Pointer[tableState]
	ready atomic.Bool
	// search is the pod's search list, for judging expansions under a
	// policy (policy.go).
	search []string
	// zoneMemo remembers zoneAllowed of the last policy set.
	zoneMemo struct {
		sync.Mutex
		p       *Policy
		allowed bool
	}
}

// NewHandler returns a Handler with no table: until SetTable, names inside
// the cluster domain get SERVFAIL and the rest is forwarded.
func NewHandler(cfg Config) (*Handler, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	zone, err := zoneWire(cfg.ClusterDomain)
	if err != nil {
		return nil, err
	}
	h := &Handler{resolver: cfg.Resolver, log: cfg.Logger, zone: zone, maxAnswers: cfg.MaxAnswers, maxAnswerBytes: cfg.MaxAnswerBytes}
	h.search = cfg.Search
	h.state.Store(newTableState(nil, cfg.MaxAnswers, cfg.MaxAnswerBytes))
	h.obs, err = observe.New(observe.Config{Registry: cfg.Registry, Logger: cfg.Logger, QueryLog: cfg.QueryLog,
		QueryLogger: cfg.QueryLogger, Tap: cfg.QueryTap, Answers: func() float64 { return float64(h.state.Load().len()) }})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// SetTable makes t the table answers come from, with an empty answer
// cache, under the policy being enforced (SetTablePolicy changes both). A
// nil t goes back to the state before the first table (pass nil itself: a
// nil pointer inside a Lookuper is a table that panics).
func (h *Handler) SetTable(t Lookuper) { h.SetTablePolicy(t, h.Policy()) }

// Ready reports whether a table is set.
func (h *Handler) Ready() bool { return h.ready.Load() }

// Serve answers the query in pkt, building the reply in dst's storage, and
// returns the reply or nil when the packet gets none. It may block on the
// Resolver.
func (h *Handler) Serve(ctx context.Context, dst, pkt []byte, p Protocol) []byte {
	r := requestPool.Get().(*request)
	reply, wait := h.answer(dst, pkt, p, r)
	if wait {
		reply = h.resolve(ctx, dst, r)
	}
	r.Pkt, r.chase = nil, nil
	requestPool.Put(r)
	return reply
}

// requestPool serves callers of Serve; the servers' readers keep one
// request each. A request escapes (it is handed to the Resolver interface),
// and allocating its ~400 bytes per query would double a table answer's
// cost.
var requestPool = sync.Pool{New: func() any { return &request{tick: rand.Uint32()} }}

// answer is the part of a query that never blocks, run by the goroutine
// that read pkt: parse it into r once, then answer from the table or the
// Resolver's cache. wait reports that r needs resolve (an upstream query
// or an ExternalName chase), which the caller runs where blocking is fine.
//
// Timing (observe.Observer.Begin): one answer in observe.TimeEvery on
// this request (a reader's own, or a pooled one: no shared counter) is
// timed; an answer that waits is timed every time, from here.
func (h *Handler) answer(dst, pkt []byte, p Protocol, r *request) (reply []byte, wait bool) {
	r.proto, r.chase, r.upErr, r.upstream, r.truncated = p, nil, nil, "", false
	r.pol, r.verdict = nil, observe.Verdict{}
	r.timing = h.obs.Begin(&r.tick)
	reply, wait = h.answerQuery(dst, pkt, r)
	if wait {
		r.timing = h.obs.Wait(r.timing)
	}
	return reply, wait
}

// answerQuery is answer without the timing.
func (h *Handler) answerQuery(dst, pkt []byte, r *request) ([]byte, bool) {
	p := r.proto
	switch dnswire.ParseQuery(pkt, &r.Query) {
	case dnswire.ParseDrop:
		h.obs.Drop(p, observe.DropMalformed)
		return nil, false
	case dnswire.ParseFormErr:
		r.QEnd, r.EDNS = 0, false
		return h.local(dst, r, malformed(r), observe.SourceLocal), false
	case dnswire.ParseSlow:
		if !h.canonicalize(r) {
			return h.local(dst, r, malformed(r), observe.SourceLocal), false
		}
	}
	return h.answerParsed(dst, r)
}

// malformed is the rcode for a query whose question cannot be used: NOTIMP
// when its opcode is not one we implement, whatever follows the header
// (RFC 8906 3.1.4: a header-only query with an unknown opcode tests for
// NOTIMP, and FORMERR would say the packet is wrong), else FORMERR.
func malformed(r *request) int {
	if r.Opcode() != dns.OpcodeQuery {
		return dns.RcodeNotImplemented
	}
	return dns.RcodeFormatError
}

// answerParsed is answer for a parsed request.
func (h *Handler) answerParsed(dst []byte, r *request) ([]byte, bool) {
	// One load gives the table and the policy of one version.
	st := h.state.Load()
	r.pol, r.zoneAllowed, r.ownsCluster = st.pol, st.zoneAllowed, st.ownsCluster
	switch {
	case r.Opcode() != dns.OpcodeQuery:
		return h.local(dst, r, dns.RcodeNotImplemented, observe.SourceLocal), false
	case r.EDNS && r.EDNSVersion > 0:
		// RFC 6891 6.1.3: we speak EDNS version 0 only.
		return h.local(dst, r, dns.RcodeBadVers, observe.SourceLocal), false
	case r.QClass != dnswire.ClassIN:
		// CHAOS and friends are not ours; the upstream may know them.
		return h.fromCache(dst, r)
	}
	if st.table == nil {
		if dnswire.InZone(r.LName(), h.zone) {
			return h.local(dst, r, dns.RcodeServerFailure, observe.SourceTable), false
		}
		return h.fromCache(dst, r)
	}
	key := r.QKey()
	out, kind, rcode := st.appendCached(dst[:0], key, r)
	if kind == kindMiss {
		var err error
		if out, kind, rcode, err = h.fill(st, dst[:0], key, r); err != nil {
			h.log.Error("pack table answer", "qname", wireName(r.Name()), "qtype", dns.Type(r.QType), "err", err)
			return h.local(dst, r, dns.RcodeServerFailure, observe.SourceTable), false
		}
	}
	if kind != kindForward && r.pol != nil && h.judge(r, true) {
		return h.deny(dst, r), false
	}
	switch kind {
	case kindForward:
		return h.fromCache(dst, r)
	case kindChase:
		return nil, true
	}
	patchReply(out, r)
	out = h.finish(out, r)
	h.observe(context.Background(), r, rcode, observe.SourceTable, out)
	return out, false
}

// resolve finishes a request answer left waiting: it chases the
// ExternalName, or asks the Resolver about the cache miss answer saw.
func (h *Handler) resolve(ctx context.Context, dst []byte, r *request) []byte {
	if !r.timing.Waited { // not through answer
		r.timing = h.obs.Wait(r.timing)
	}
	if r.chase != nil {
		return h.chase(ctx, dst, r)
	}
	r.upstream = ""
	if h.obs.Tapping() {
		r.probe.Record()
	}
	out, s, err := h.resolver.Resolve(ctx, dst[:0], r.QWire(), r.QKey(), &r.probe)
	if err != nil || len(out) < r.QEnd {
		rcode := dns.RcodeServerFailure
		if isOverloaded(err) {
			rcode = dns.RcodeRefused
		}
		r.upErr = errOr(err, errShortReply)
		if h.log.Enabled(ctx, slog.LevelDebug) {
			h.log.DebugContext(ctx, "forward failed", "qname", wireName(r.Name()), "qtype", dns.Type(r.QType), "err", err)
		}
		return h.local(dst, r, rcode, observe.SourceUpstream)
	}
	r.upstream = r.probe.Upstream()
	return h.forwarded(ctx, out, r, s)
}

// fill asks the table about a question not seen since the last swap.
func (h *Handler) fill(st *tableState, dst, key []byte, r *request) ([]byte, answerKind, int, error) {
	return st.build(dst, key, r)
}

// fromCache answers r from the Resolver's cache, or reports that it must
// wait for resolve. A hit answered here is timed like a table answer (1 in
// timeMask+1).
func (h *Handler) fromCache(dst []byte, r *request) ([]byte, bool) {
	// A denied name is never asked upstream nor answered from the cache.
	if r.pol != nil && h.judge(r, false) {
		return h.deny(dst, r), false
	}
	out, s, ok := h.resolver.AppendCached(dst[:0], r.QWire(), r.QKey(), &r.probe)
	if !ok || len(out) < r.QEnd {
		return nil, true
	}
	return h.forwarded(context.Background(), out, r, s), false
}

// rotate turns the run of A/AAAA records in out by a random amount: the
// records have equal length, so this is a copy with no re-packing, and
// each address comes first equally often.
func rotate(out []byte, a *answer) {
	r := rand.IntN(a.shufN)
	if r == 0 {
		return
	}
	src := a.msg[a.shufOff : a.shufOff+a.shufN*a.shufLen]
	split := r * a.shufLen
	n := copy(out[a.shufOff:], src[split:])
	copy(out[a.shufOff+n:], src[:split])
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

// forwarded finishes a reply from the Resolver for the client.
func (h *Handler) forwarded(ctx context.Context, out []byte, r *request, s upstream.Source) []byte {
	if r.pol != nil && h.judgeChain(out, r) {
		return h.deny(out[:0], r)
	}
	patchReply(out, r)
	out = h.finish(out, r)
	h.observe(ctx, r, int(out[3]&dnswire.RcodeMask), resolverSource(s), out)
	return out
}

// local writes a reply the proxy makes up itself: header, the question
// when r has one, and OPT when the client sent one. RA, RD, CD and AD are
// defined for QUERY only: a reply to another opcode (NOTIMP, from us or
// through the slow path) has them all clear (AD is never set here), so
// it does not claim recursion for an operation we do not implement.
func (h *Handler) local(dst []byte, r *request, rcode int, src observe.Source) []byte {
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
	h.observe(context.Background(), r, rcode, src, out)
	return out
}

// finish truncates a reply to what the client takes and adds our OPT.
func (h *Handler) finish(out []byte, r *request) []byte {
	limit := dns.MaxMsgSize
	if r.proto == UDP {
		limit = r.UDPSize
	}
	if r.EDNS {
		limit -= dnswire.OPTLen
	}
	if len(out) > limit {
		out = dnswire.Truncate(out, limit)
		r.truncated = true
	}
	if r.EDNS {
		out = dnswire.AppendReplyOPT(out, int(out[3]&dnswire.RcodeMask), r.DO)
	}
	return out
}

// observe hands what became of r, answered with out, to the observer.
func (h *Handler) observe(ctx context.Context, r *request, rcode int, src observe.Source, out []byte) {
	r.src = src
	oc := observe.Outcome{Query: &r.Query, Protocol: r.proto, Rcode: rcode, Source: src, Reply: out,
		Truncated: r.truncated, Timing: r.timing, Verdict: r.verdict, Upstream: r.upstream, UpErr: r.upErr,
		Probe: &r.probe, Client: r.client, Server: r.server}
	if r.pol != nil {
		oc.Policy = r.pol
	}
	h.obs.Observe(ctx, &oc)
}

// errShortReply stands for a Resolver reply too short to hold the question.
var errShortReply = errors.New("reply shorter than its question")

func errOr(err, alt error) error {
	if err != nil {
		return err
	}
	return alt
}

// wireName converts a wire-form name to presentation form (allocates).
func wireName(name []byte) string {
	s, _, err := dns.UnpackDomainName(name, 0)
	if err != nil {
		return "<bad name>"
	}
	return s
}
