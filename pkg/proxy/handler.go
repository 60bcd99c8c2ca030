package proxy

import (
	"context"
	"encoding/binary"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// Handler turns one query packet into one reply packet. It is safe for
// concurrent use; the listeners of a Server share one, and benchmarks call
// it directly.
type Handler struct {
	resolver Resolver
	log      *slog.Logger
	m        *metrics
	// zone is the cluster domain in lowercased wire form.
	zone       []byte
	maxAnswers int
	// state is the current table with its answer cache; never nil. Each
	// query loads it once, so a swap never waits for queries.
	state atomic.Pointer[tableState]
	ready atomic.Bool
	// expired is a context that is already done (see appendCached).
	expired context.Context
	// cached is the Resolver's cache-only fast path, or nil.
	cached CacheAppender
	// epoch anchors clock.
	epoch time.Time
}

// clock reads the monotonic clock only (time.Now reads the wall clock
// too); never zero, which stands for "not taken". Clock reads cost ~45ns
// each here, measurable next to a table answer's ~200ns, so table answers
// are not timed at all (see observe).
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
	h := &Handler{resolver: cfg.Resolver, log: cfg.Logger, zone: zone, maxAnswers: cfg.MaxAnswers}
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	h.expired = expired
	h.cached, _ = cfg.Resolver.(CacheAppender)
	h.epoch = time.Now()
	h.state.Store(newTableState(nil, cfg.MaxAnswers))
	h.m, err = newMetrics(cfg.Registerer, func() float64 { return float64(h.state.Load().len()) })
	if err != nil {
		return nil, err
	}
	return h, nil
}

// SetTable makes t the table answers come from, with an empty answer
// cache. A nil t (or a nil *nametable.Table) goes back to the state before
// the first table.
func (h *Handler) SetTable(t Lookuper) {
	if t != nil {
		if v := reflect.ValueOf(t); v.Kind() == reflect.Pointer && v.IsNil() {
			t = nil
		}
	}
	h.state.Store(newTableState(t, h.maxAnswers))
	h.ready.Store(t != nil)
}

// Ready reports whether a table is set.
func (h *Handler) Ready() bool { return h.ready.Load() }

// Serve answers the query in pkt, building the reply in dst's storage, and
// returns the reply or nil when the packet gets none. It may block on the
// Resolver.
func (h *Handler) Serve(ctx context.Context, dst, pkt []byte, p Protocol) []byte {
	reply, _ := h.serve(ctx, dst, pkt, p, true, 0)
	return reply
}

// serve is Serve; when block is false it returns deferred=true instead of
// calling the Resolver, so a UDP reader can hand the query to a worker and
// keep answering table names.
func (h *Handler) serve(ctx context.Context, dst, pkt []byte, p Protocol, block bool, start time.Duration) (reply []byte, deferred bool) {
	var q query
	switch parseQuery(pkt, &q) {
	case parseDrop:
		h.m.drop(p, dropMalformed)
		return nil, false
	case parseFormErr:
		return h.local(dst, &q, p, dns.RcodeFormatError, false, srcLocal, start), false
	case parseSlow:
		return h.serveSlow(ctx, dst, pkt, p, block, start)
	}
	return h.serveQuery(ctx, dst, &q, p, block, start)
}

// serveQuery answers a parsed query.
func (h *Handler) serveQuery(ctx context.Context, dst []byte, q *query, p Protocol, block bool, start time.Duration) ([]byte, bool) {
	switch {
	case q.opcode() != dns.OpcodeQuery:
		return h.local(dst, q, p, dns.RcodeNotImplemented, true, srcLocal, start), false
	case q.edns && q.ednsVersion > 0:
		// RFC 6891 6.1.3: we speak EDNS version 0 only.
		return h.local(dst, q, p, dns.RcodeBadVers, true, srcLocal, start), false
	case q.qclass != classIN:
		// CHAOS and friends are not ours; the upstream may know them.
		return h.forward(ctx, dst, q, p, block, start)
	}

	st := h.state.Load()
	var keyBuf [maxNameLen + 4]byte
	key := appendLowerName(keyBuf[:0], q.name)
	if st.table == nil {
		if inZone(key, h.zone) {
			return h.local(dst, q, p, dns.RcodeServerFailure, true, srcTable, start), false
		}
		return h.forward(ctx, dst, q, p, block, start)
	}
	key = append(key, byte(q.qtype>>8), byte(q.qtype), byte(q.qclass>>8), byte(q.qclass))
	a := st.get(key)
	if a == nil {
		var err error
		if a, err = h.fill(st, key, q); err != nil {
			h.log.Error("pack table answer", "qname", wireName(q.name), "qtype", dns.Type(q.qtype), "err", err)
			return h.local(dst, q, p, dns.RcodeServerFailure, true, srcTable, start), false
		}
	}
	switch a.kind {
	case kindForward:
		return h.forward(ctx, dst, q, p, block, start)
	case kindChase:
		if !block {
			return nil, true
		}
		return h.chase(ctx, dst, q, a.res, p, start), false
	}
	out := append(dst[:0], a.msg...)
	if a.shufN > 1 {
		rotate(out, a)
	}
	patchReply(out, q)
	out = h.finish(out, q, p)
	h.observe(ctx, q, p, a.rcode, srcTable, start)
	return out, false
}

// fill asks the table about a question not seen since the last swap.
func (h *Handler) fill(st *tableState, key []byte, q *query) (*answer, error) {
	a, err := buildAnswer(st.table, wireName(key[:len(q.name)]), q.qtype, q.qclass)
	if err != nil {
		return nil, err
	}
	st.put(key, a)
	return a, nil
}

// appendCached answers from the Resolver's cache without blocking: through
// CacheAppender when the Resolver has it, else with AppendReply and an
// expired context (the Resolver contract says that answers a cache hit and
// fails anything else at once; a miss may start resolving in the
// background, which the worker that gets the query then joins).
func (h *Handler) appendCached(dst, qwire []byte) ([]byte, upstream.Source, bool) {
	if h.cached != nil {
		return h.cached.AppendCached(dst, qwire)
	}
	out, s, err := h.resolver.AppendReply(h.expired, dst, qwire)
	return out, s, err == nil
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

// patchReply makes a stored reply (ID 0, lowercase question) answer q: the
// client's ID, RD and CD bits, and its question bytes, so owner names
// compressed to offset 12 echo the client's spelling.
func patchReply(out []byte, q *query) {
	binary.BigEndian.PutUint16(out[0:], q.id)
	flags := binary.BigEndian.Uint16(out[2:])&^(flagRD|flagCD) | q.flags&(flagRD|flagCD)
	binary.BigEndian.PutUint16(out[2:], flags)
	copy(out[headerLen:], q.qwire)
}

// forward answers q through the Resolver. When the caller cannot block it
// still tries the Resolver with an expired context, which by the Resolver
// contract answers a cache hit at once and fails anything else fast: cache
// hits then cost no hand-over to a worker goroutine (issue 3 allows them
// only 1.3x a reflector's CPU).
func (h *Handler) forward(ctx context.Context, dst []byte, q *query, p Protocol, block bool, start time.Duration) ([]byte, bool) {
	if !block {
		// A cache hit answered on the reader is not timed, like a table
		// answer: it takes well under a microsecond, and the two clock
		// reads would cost a percent or two of the query.
		out, s, ok := h.appendCached(dst[:0], q.qwire)
		if !ok || len(out) < headerLen+len(q.qwire) {
			return nil, true
		}
		return h.forwarded(ctx, out, q, p, s, 0), false
	}
	if start == 0 {
		start = h.clock()
	}
	out, s, err := h.resolver.AppendReply(ctx, dst[:0], q.qwire)
	if err != nil || len(out) < headerLen+len(q.qwire) {
		rcode := dns.RcodeServerFailure
		if isOverloaded(err) {
			rcode = dns.RcodeRefused
		}
		if h.log.Enabled(ctx, slog.LevelDebug) {
			h.log.DebugContext(ctx, "forward failed", "qname", wireName(q.name), "qtype", dns.Type(q.qtype), "err", err)
		}
		return h.local(dst, q, p, rcode, true, srcUpstream, start), false
	}
	return h.forwarded(ctx, out, q, p, s, start), false
}

// forwarded finishes a reply from the Resolver for the client.
func (h *Handler) forwarded(ctx context.Context, out []byte, q *query, p Protocol, s upstream.Source, start time.Duration) []byte {
	patchReply(out, q)
	out = h.finish(out, q, p)
	h.observe(ctx, q, p, int(out[3]&rcodeMask), resolverSource(s), start)
	return out
}

// local writes a reply the proxy makes up itself: header, the question
// when withQuestion, and OPT when the client sent one.
func (h *Handler) local(dst []byte, q *query, p Protocol, rcode int, withQuestion bool, src source, start time.Duration) []byte {
	out := dst[:0]
	flags := flagQR | flagRA | q.flags&(maskOp|flagRD|flagCD) | uint16(rcode&rcodeMask)
	var qd byte
	if withQuestion {
		qd = 1
	}
	out = append(out, byte(q.id>>8), byte(q.id), byte(flags>>8), byte(flags), 0, qd, 0, 0, 0, 0, 0, 0)
	if withQuestion {
		out = append(out, q.qwire...)
	}
	if q.edns {
		out = appendOPT(out, rcode, q.do)
	}
	h.observe(context.Background(), q, p, rcode, src, start)
	return out
}

// finish truncates a reply to what the client takes and adds our OPT.
func (h *Handler) finish(out []byte, q *query, p Protocol) []byte {
	limit := dns.MaxMsgSize
	if p == UDP {
		limit = q.udpSize
	}
	if q.edns {
		limit -= optLen
	}
	if len(out) > limit {
		out = truncate(out, limit)
		h.m.truncate(p)
	}
	if q.edns {
		out = appendOPT(out, int(out[3]&rcodeMask), q.do)
	}
	return out
}

// observe counts a reply. start is when the query was read, or zero when
// not taken (table and local answers): their time is the handler's ~200ns,
// and the duration histogram is about what the Resolver costs.
func (h *Handler) observe(ctx context.Context, q *query, p Protocol, rcode int, src source, start time.Duration) {
	var elapsed time.Duration
	if start != 0 {
		elapsed = h.clock() - start
	}
	h.m.observe(p, q.qtype, rcode, src, start != 0, elapsed)
	if h.log.Enabled(ctx, slog.LevelDebug) {
		h.log.DebugContext(ctx, "dns query", "qname", wireName(q.name), "qtype", dns.Type(q.qtype),
			"rcode", dns.RcodeToString[rcode], "source", sourceNames[src], "protocol", p.String(),
			"duration", elapsed)
	}
}

// wireName converts a wire-form name to presentation form (allocates).
func wireName(name []byte) string {
	s, _, err := dns.UnpackDomainName(name, 0)
	if err != nil {
		return "<bad name>"
	}
	return s
}

// refuse answers REFUSED to a query the server has no capacity for.
func (h *Handler) refuse(dst, pkt []byte, p Protocol) []byte {
	var q query
	switch parseQuery(pkt, &q) {
	case parseDrop:
		return nil
	case parseOK:
		return h.local(dst, &q, p, dns.RcodeRefused, true, srcLocal, 0)
	}
	return h.local(dst, &query{id: q.id, flags: q.flags}, p, dns.RcodeRefused, false, srcLocal, 0)
}
