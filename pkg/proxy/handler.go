package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// Handler turns one query packet into one reply packet. It is safe for
// concurrent use; the listeners of a Server share one, and benchmarks call
// it directly.
type Handler struct {
	resolver Resolver
	log      *slog.Logger
	m        *proxyMetrics
	// zone is the cluster domain in lowercased wire form.
	zone                       []byte
	maxAnswers, maxAnswerBytes int
	// state is the current table with its answer cache; never nil. Each
	// query loads it once, so a swap never waits for queries.
	state atomic.Pointer[tableState]
	ready atomic.Bool
	// epoch anchors clock.
	epoch time.Time
	// timeMask: one answer in timeMask+1 that does not wait for the
	// Resolver is timed, counted with that weight (see answer).
	timeMask uint32
	// qlog is the query log, nil when off (SetQueryLog); qlogOut its
	// output. qlogNow and qlogIntN, when set (tests), replace the clock of
	// its rate cap and the random numbers of its sampling.
	qlog     atomic.Pointer[queryLogger]
	qlogOut  *slog.Logger
	qlogNow  func() time.Time
	qlogIntN func(int) int
	// search is the pod's search list, for judging expansions under a
	// policy (policy.go); pm counts the policy's decisions.
	search []string
	pm     policyMetrics
	// zoneMemo remembers zoneAllowed of the last policy set.
	zoneMemo struct {
		sync.Mutex
		p       *Policy
		allowed bool
	}
	// tap is the query log's second output (Config.QueryTap), or nil.
	tap Tap
	// failing counts failing answers per name (failing.go), nil when off.
	failing atomic.Pointer[FailingNames]
}

// answerTimeEvery is the period of timing for answers that do not wait
// (a power of two). Clock reads cost ~45ns each here, measurable next to a
// table answer's ~200ns; every answer that waits is timed.
const answerTimeEvery = 16

// clock reads the monotonic clock only (time.Now reads the wall clock
// too); never zero, which stands for "not taken".
func (h *Handler) clock() time.Duration { return time.Since(h.epoch) + 1 }

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
	h.timeMask = answerTimeEvery - 1
	h.search = cfg.Search
	h.qlogOut, h.tap = cfg.QueryLogger, cfg.QueryTap
	h.epoch = time.Now()
	h.state.Store(newTableState(nil, cfg.MaxAnswers, cfg.MaxAnswerBytes))
	h.m, err = newMetrics(cfg.Registry, func() float64 { return float64(h.state.Load().len()) })
	if err != nil {
		return nil, err
	}
	if err := registerPolicyMetrics(cfg.Registry, &h.pm); err != nil {
		return nil, fmt.Errorf("register proxy metrics: %w", err)
	}
	h.SetQueryLog(cfg.QueryLog)
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
// Timing: one answer in timeMask+1 on this request (a reader's own, or a
// pooled one: no shared counter) starts the clock and counts for that
// many, an unbiased estimate of the rest; an answer that waits is timed
// every time, from here.
func (h *Handler) answer(dst, pkt []byte, p Protocol, r *request) (reply []byte, wait bool) {
	r.proto, r.start, r.weight, r.waited, r.chase, r.upErr, r.upstream = p, 0, 0, false, nil, nil, ""
	r.pol, r.verdict = nil, verdict{}
	if r.tick++; r.tick&h.timeMask == 0 {
		r.start, r.weight = h.clock(), h.timeMask+1
	}
	// The query log, when on, has every answer timed (its lines carry the
	// duration); the histograms keep their sample.
	if r.qlog = h.qlog.Load(); r.qlog != nil && r.start == 0 {
		r.start = h.clock()
	}
	reply, wait = h.answerQuery(dst, pkt, r)
	if wait {
		if r.start == 0 {
			r.start = h.clock()
		}
		r.weight, r.waited = 1, true
	}
	return reply, wait
}

// answerQuery is answer without the timing.
func (h *Handler) answerQuery(dst, pkt []byte, r *request) ([]byte, bool) {
	p := r.proto
	switch dnswire.ParseQuery(pkt, &r.Query) {
	case dnswire.ParseDrop:
		h.m.drop(p, dropMalformed)
		return nil, false
	case dnswire.ParseFormErr:
		r.QEnd, r.EDNS = 0, false
		return h.local(dst, r, malformed(r), srcLocal), false
	case dnswire.ParseSlow:
		if !h.canonicalize(r) {
			return h.local(dst, r, malformed(r), srcLocal), false
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
		return h.local(dst, r, dns.RcodeNotImplemented, srcLocal), false
	case r.EDNS && r.EDNSVersion > 0:
		// RFC 6891 6.1.3: we speak EDNS version 0 only.
		return h.local(dst, r, dns.RcodeBadVers, srcLocal), false
	case r.QClass != dnswire.ClassIN:
		// CHAOS and friends are not ours; the upstream may know them.
		return h.fromCache(dst, r)
	}
	if st.table == nil {
		if dnswire.InZone(r.LName(), h.zone) {
			return h.local(dst, r, dns.RcodeServerFailure, srcTable), false
		}
		return h.fromCache(dst, r)
	}
	key := r.QKey()
	out, kind, rcode := st.appendCached(dst[:0], key, r)
	if kind == kindMiss {
		var err error
		if out, kind, rcode, err = h.fill(st, dst[:0], key, r); err != nil {
			h.log.Error("pack table answer", "qname", wireName(r.Name()), "qtype", dns.Type(r.QType), "err", err)
			return h.local(dst, r, dns.RcodeServerFailure, srcTable), false
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
	h.observe(context.Background(), r, rcode, srcTable, out)
	return out, false
}

// resolve finishes a request answer left waiting: it chases the
// ExternalName, or asks the Resolver about the cache miss answer saw.
func (h *Handler) resolve(ctx context.Context, dst []byte, r *request) []byte {
	if r.start == 0 { // not through answer
		r.start, r.weight, r.waited = h.clock(), 1, true
	}
	if r.chase != nil {
		return h.chase(ctx, dst, r)
	}
	r.upstream = ""
	h.recordForwards(r)
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
		return h.local(dst, r, rcode, srcUpstream)
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
func (h *Handler) local(dst []byte, r *request, rcode int, src source) []byte {
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
		h.m.truncate(r.proto)
	}
	if r.EDNS {
		out = dnswire.AppendReplyOPT(out, int(out[3]&dnswire.RcodeMask), r.DO)
	}
	return out
}

// observe counts the reply out, and times it when answer started the
// clock (r.weight > 0).
func (h *Handler) observe(ctx context.Context, r *request, rcode int, src source, out []byte) {
	var elapsed time.Duration
	if r.start != 0 {
		elapsed = h.clock() - r.start
	}
	r.src = src
	if r.verdict.judged {
		h.countDecision(r)
	}
	h.m.observe(r.proto, r.QType, rcode, src, r.waited, r.weight, elapsed, len(out))
	h.recordFailing(r, rcode)
	if r.qlog != nil {
		r.qlog.write(h, r, out, rcode, src, elapsed)
	}
	if h.log.Enabled(ctx, slog.LevelDebug) {
		h.log.DebugContext(ctx, "dns query", "qname", wireName(r.Name()), "qtype", dns.Type(r.QType),
			"rcode", dns.RcodeToString[rcode], "source", sourceNames[src], "protocol", r.proto.String(),
			"duration", elapsed)
	}
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
