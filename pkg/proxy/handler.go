package proxy

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/proxy/observe"
)

// Handler turns one query packet into one reply packet. It is safe for
// concurrent use; the listeners of a Server share one, and benchmarks call
// it directly.
type Handler struct {
	// decider holds what the decide stage reads (decide.go), and the
	// observer (obs) that counts, times and logs each query's outcome
	// (pkg/proxy/observe).
	decider
	maxAnswers, maxAnswerBytes int
	ready                      atomic.Bool
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
	h := &Handler{decider: decider{resolver: cfg.Resolver, log: cfg.Logger, zone: zone, search: cfg.Search},
		maxAnswers: cfg.MaxAnswers, maxAnswerBytes: cfg.MaxAnswerBytes}
	h.state.Store(newTableState(nil, cfg.MaxAnswers, cfg.MaxAnswerBytes))
	h.obs, err = observe.New(observe.Config{Registry: cfg.Registry, Logger: cfg.Logger, QueryLog: cfg.QueryLog,
		QueryLogger: cfg.QueryLogger, Tap: cfg.QueryTap, Answers: func() float64 { return float64(h.state.Load().len()) }})
	if err != nil {
		return nil, err
	}
	return h, nil
}

// Ready reports whether a table is set.
func (h *Handler) Ready() bool { return h.ready.Load() }

// Serve answers the query in pkt, building the reply in dst's storage, and
// returns the reply or nil when the packet gets none. It may block on the
// Resolver.
func (h *Handler) Serve(ctx context.Context, dst, pkt []byte, p Protocol) []byte {
	q := queryPool.Get().(*query)
	reply, wait := h.answer(dst, pkt, p, q)
	if wait {
		reply = h.resolve(ctx, dst, q)
	}
	// Keep nothing of the caller's buffers or the table alive.
	q.req.Pkt, q.dec.out, q.dec.Reply, q.dec.Query, q.dec.chase = nil, nil, nil, nil, nil
	queryPool.Put(q)
	return reply
}

// queryPool serves callers of Serve; the servers' readers keep one query
// each. A query escapes (it is handed to the Resolver interface), and
// allocating its ~700 bytes per query would double a table answer's cost.
var queryPool = sync.Pool{New: func() any { return &query{tick: rand.Uint32()} }}

// answer is the part of a query that never blocks, run by the goroutine
// that read pkt, one stage after the other: parse pkt into q once, decide
// from the table, the policy and the Resolver's cache, then reply and
// observe. wait reports that q needs resolve (an upstream query or an
// ExternalName chase), which the caller runs where blocking is fine.
// The observer times one answer in observe.TimeEvery on this query value
// (a reader's own, or a pooled one: no shared counter), and every answer
// that waits.
func (h *Handler) answer(dst, pkt []byte, p Protocol, q *query) (reply []byte, wait bool) {
	q.dec = decision{}
	q.tick++
	h.obs.Begin(q.tick, &q.dec.Timing)
	r, d := &q.req, &q.dec
	r.proto = p
	switch rcode := parse(pkt, r); {
	case rcode == parsedDrop:
		h.obs.Drop(p, observe.DropMalformed)
		return nil, false
	case rcode >= 0:
		d.madeUp(rcode, observe.SourceLocal)
	default:
		h.decide(dst, r, d)
	}
	if d.act == actWait {
		d.Timing = h.obs.Wait(d.Timing)
		return nil, true
	}
	return send(context.Background(), h.obs, dst, q), false
}

// resolve finishes a query answer left waiting: the rest of the decide
// stage (the Resolver, or the ExternalName's chase), then reply and
// observe.
func (h *Handler) resolve(ctx context.Context, dst []byte, q *query) []byte {
	if !q.dec.Timing.Waited { // not through answer
		q.dec.Timing = h.obs.Wait(q.dec.Timing)
	}
	h.decideWait(ctx, dst, &q.req, &q.dec)
	return send(ctx, h.obs, dst, q)
}

// refuse answers q with REFUSED: no forwarding worker can take it.
func (h *Handler) refuse(dst []byte, q *query) []byte {
	q.dec.madeUp(dns.RcodeRefused, observe.SourceLocal)
	return send(context.Background(), h.obs, dst, q)
}

// SetQueryLog switches the query log to cfg; safe while serving (the
// next answer sees it). A zero Classes turns it off, after which an answer
// pays one atomic load for it.
func (h *Handler) SetQueryLog(cfg QueryLogConfig) { h.obs.SetQueryLog(cfg) }

// QueryLog returns the query log's configuration.
func (h *Handler) QueryLog() QueryLogConfig { return h.obs.QueryLog() }

// SetFailingNames makes the handler count failing answers in f; nil
// stops it.
func (h *Handler) SetFailingNames(f *FailingNames) { h.obs.SetFailingNames(f) }
