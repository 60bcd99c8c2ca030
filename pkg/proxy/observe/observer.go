package observe

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/metric"
)

// Config configures an Observer; zero values are the defaults.
type Config struct {
	// Registry receives the metrics; nil keeps them unregistered.
	Registry metric.Registry
	// Logger gets one line per query at Debug; nil discards.
	Logger *slog.Logger
	// QueryLog is the query log's first configuration (off by default);
	// QueryLogger receives its lines at Info (nil: none written) and Tap
	// its answers in wire form (nil: none).
	QueryLog    QueryLogConfig
	QueryLogger *slog.Logger
	Tap         Tap
	// Answers reads the entries of the proxy's answer cache, for its
	// gauge; nil reads 0.
	Answers func() float64
}

// Observer is where a query's outcome is counted, timed and logged: the
// metrics, the answer histograms, the query log with its Tap, the
// failing-names summary and the Debug line. The proxy hands it one
// Outcome per answered query (Observe) and counts nothing itself. Safe
// for concurrent use.
type Observer struct {
	m   *metrics
	pm  policyMetrics
	log *slog.Logger
	// epoch anchors Clock.
	epoch time.Time
	// timeMask: one answer in timeMask+1 that does not wait for the
	// Resolver is timed, counted with that weight (see Begin).
	timeMask uint32
	// qlog is the query log, nil when off (SetQueryLog); qlogOut its
	// output. qlogNow and qlogIntN replace the clock of its rate cap and
	// the random numbers of its sampling (SetQueryLogClock).
	qlog     atomic.Pointer[queryLogger]
	qlogOn   atomic.Bool // qlog != nil, cheaper to load
	qlogOut  *slog.Logger
	qlogNow  func() time.Time
	qlogIntN func(int) int
	// tap is the query log's second output, or nil.
	tap Tap
	// failing counts failing answers per name (failing.go), nil when off.
	failing atomic.Pointer[FailingNames]
}

// TimeEvery is the period of timing for answers that do not wait (a power
// of two). Clock reads cost ~45ns each here, measurable next to a table
// answer's ~200ns; every answer that waits is timed.
const TimeEvery = 16

// New returns an Observer with its metrics registered on cfg.Registry.
func New(cfg Config) (*Observer, error) {
	if cfg.Registry == nil {
		cfg.Registry = metric.Nop{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.QueryLogger == nil {
		cfg.QueryLogger = slog.New(slog.DiscardHandler)
	}
	answers := cfg.Answers
	if answers == nil {
		answers = func() float64 { return 0 }
	}
	o := &Observer{log: cfg.Logger, epoch: time.Now(), timeMask: TimeEvery - 1, qlogOut: cfg.QueryLogger, tap: cfg.Tap}
	var err error
	if o.m, err = newMetrics(cfg.Registry, answers); err != nil {
		return nil, err
	}
	if err := registerPolicyMetrics(cfg.Registry, &o.pm); err != nil {
		return nil, fmt.Errorf("register proxy metrics: %w", err)
	}
	o.SetQueryLog(cfg.QueryLog)
	return o, nil
}

// Clock reads the monotonic clock only (time.Now reads the wall clock
// too); never zero, which stands for "not taken".
func (o *Observer) Clock() time.Duration { return time.Since(o.epoch) + 1 }

// Begin starts the timing of a query that may be answered without
// waiting, in *t (zero before): one answer in TimeEvery ticks (the caller
// counts them on a reader's own counter, or a pooled query's: no shared
// counter) starts the clock and counts for that many, an unbiased
// estimate of the rest. The
// query log, when on, has every answer timed (its lines carry the
// duration); the histograms keep their sample. Small enough to inline:
// most answers pay an increment, a mask and one atomic load.
func (o *Observer) Begin(tick uint32, t *Timing) {
	if tick&o.timeMask == 0 || o.qlogOn.Load() {
		o.begin(tick, t)
	}
}

// begin is Begin for an answer that is timed.
func (o *Observer) begin(tick uint32, t *Timing) {
	t.Start = o.Clock()
	if tick&o.timeMask == 0 {
		t.Weight = o.timeMask + 1
	}
}

// Wait marks a query that waits for the Resolver: timed every time, from
// Begin when it started the clock, else from now.
func (o *Observer) Wait(t Timing) Timing {
	if t.Start == 0 {
		t.Start = o.Clock()
	}
	t.Weight, t.Waited = 1, true
	return t
}

// Observe counts, times and logs one answered query.
func (o *Observer) Observe(ctx context.Context, oc *Outcome) {
	var elapsed time.Duration
	if oc.Timing.Start != 0 {
		elapsed = o.Clock() - oc.Timing.Start
	}
	if oc.Verdict.Judged {
		o.pm.count(&oc.Verdict)
	}
	if oc.Truncated {
		o.m.truncated[oc.Protocol].Inc()
	}
	o.m.observe(oc, elapsed)
	if oc.Rcode != dns.RcodeSuccess {
		o.recordFailing(oc)
	}
	if ql := o.qlog.Load(); ql != nil {
		ql.write(o, oc, elapsed)
	}
	if o.log.Enabled(ctx, slog.LevelDebug) {
		o.log.DebugContext(ctx, "dns query", "qname", wireName(oc.Query.Name()), "qtype", dns.Type(oc.Query.QType),
			"rcode", dns.RcodeToString[oc.Rcode], "source", sourceNames[oc.Source], "protocol", oc.Protocol.String(),
			"duration", elapsed)
	}
}

// Drop counts a query, packet or connection dropped without a reply.
func (o *Observer) Drop(p Protocol, r DropReason) { o.m.dropped[p][r].Inc() }

// Dropped is what Drop counted for (p, r).
func (o *Observer) Dropped(p Protocol, r DropReason) uint64 { return o.m.dropped[p][r].Load() }

// TCPConn counts a client TCP connection opened (+1) or closed (-1).
func (o *Observer) TCPConn(delta int64) { o.m.tcpConns.Add(delta) }

// WatchUDP starts counting the queries the kernel drops on c (a full
// receive queue) from now on; ForgetUDP counts what it dropped since and
// stops.
func (o *Observer) WatchUDP(c *net.UDPConn) { o.m.udpQueue.watch(c) }

// ForgetUDP: see WatchUDP.
func (o *Observer) ForgetUDP(c *net.UDPConn) {
	o.m.udpQueue.forget(c, &o.m.dropped[UDP][DropQueueFull])
}

// Tapping reports whether a Tap may write the next answers, so the proxy
// asks the Resolver to note its upstream exchanges: the sampling is
// decided only once the answer is known.
func (o *Observer) Tapping() bool {
	ql := o.qlog.Load()
	return ql != nil && ql.out != nil
}

// SetTimeEvery times one answer in n (a power of two) that does not wait
// instead of TimeEvery, for tests and benchmarks.
func (o *Observer) SetTimeEvery(n uint32) { o.timeMask = n - 1 }

// SetQueryLogClock replaces, for the query logs set from now on, the clock
// of the rate cap and the random numbers of the sampling (tests).
func (o *Observer) SetQueryLogClock(now func() time.Time, intN func(int) int) {
	o.qlogNow, o.qlogIntN = now, intN
}

// wireName converts a wire-form name to presentation form (allocates).
func wireName(name []byte) string {
	s, _, err := dns.UnpackDomainName(name, 0)
	if err != nil {
		return "<bad name>"
	}
	return s
}
