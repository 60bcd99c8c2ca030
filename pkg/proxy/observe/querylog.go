package observe

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
)

// QueryLogClass is a set of answers the query log writes.
type QueryLogClass uint8

const (
	// LogDenied: queries a policy denied (also in audit mode, answered
	// as allowed); the line names the rule.
	LogDenied QueryLogClass = 1 << iota
	LogNXDomain
	LogServFail
	// LogUpstreamError: the Resolver failed (SERVFAIL or REFUSED made up
	// by the proxy, with the error).
	LogUpstreamError
	// LogAll: every answer.
	LogAll
)

var queryLogClassNames = []struct {
	c    QueryLogClass
	name string
}{
	{LogDenied, "denied"}, {LogNXDomain, "nxdomain"}, {LogServFail, "servfail"},
	{LogUpstreamError, "upstream_error"}, {LogAll, "all"},
}

// ParseQueryLogClasses parses a comma-separated list of class names
// (denied, nxdomain, servfail, upstream_error, all); "" and "off" are none.
func ParseQueryLogClasses(s string) (QueryLogClass, error) {
	var c QueryLogClass
	if s == "" || s == "off" {
		return 0, nil
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		found := false
		for _, n := range queryLogClassNames {
			if f == n.name {
				c |= n.c
				found = true
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown query log class %q (want denied, nxdomain, servfail, upstream_error, all or off)", f)
		}
	}
	return c, nil
}

// String lists the classes of c as ParseQueryLogClasses takes them.
func (c QueryLogClass) String() string {
	var names []string
	for _, n := range queryLogClassNames {
		if c&n.c != 0 {
			names = append(names, n.name)
		}
	}
	if len(names) == 0 {
		return "off"
	}
	return strings.Join(names, ",")
}

// MarshalText writes c as String does, so JSON shows the names.
func (c QueryLogClass) MarshalText() ([]byte, error) { return []byte(c.String()), nil }

// UnmarshalText reads c as ParseQueryLogClasses does.
func (c *QueryLogClass) UnmarshalText(b []byte) error {
	v, err := ParseQueryLogClasses(string(b))
	if err != nil {
		return err
	}
	*c = v
	return nil
}

// QueryLogConfig says which answers the query log writes. The zero value
// is off.
type QueryLogConfig struct {
	// Classes selects the answers logged; 0 turns the log off.
	Classes QueryLogClass `json:"classes"`
	// Sample logs one matching answer in Sample, at random; 0 or 1 logs
	// each.
	Sample int `json:"sample"`
	// Rate caps the lines written per second; 0 means no cap.
	Rate int `json:"rate"`
}

// queryLogger writes the query log of one QueryLogConfig; an Observer swaps
// in a new one on SetQueryLog, so its fields never change.
type queryLogger struct {
	cfg QueryLogConfig
	// log receives the JSON lines; a logger not enabled at Info writes
	// none (the agent's --query-log-stderr=false).
	log *slog.Logger
	// out is the second output, or nil.
	out  Tap
	m    *metrics
	now  func() time.Time
	intN func(int) int
	// second is the unix second lines are counted in; lines those written
	// in it.
	second atomic.Int64
	lines  atomic.Int64
}

// queryLogOutcome labels what became of an answer the classes matched.
type queryLogOutcome uint8

const (
	qlWritten queryLogOutcome = iota
	qlSampledOut
	qlRateLimited
	nQueryLogOutcomes
)

var queryLogOutcomeNames = [nQueryLogOutcomes]string{"written", "sampled_out", "rate_limited"}

// SetQueryLog switches the query log to cfg; safe while serving (the
// next answer sees it). A zero Classes turns it off, after which an answer
// pays one atomic load for it.
func (o *Observer) SetQueryLog(cfg QueryLogConfig) {
	if cfg.Classes == 0 {
		o.qlog.Store(nil)
		o.qlogOn.Store(false)
		return
	}
	now, intN := o.qlogNow, o.qlogIntN
	if now == nil {
		now = time.Now
	}
	if intN == nil {
		intN = rand.IntN
	}
	o.qlog.Store(&queryLogger{cfg: cfg, log: o.qlogOut, out: o.tap, m: o.m, now: now, intN: intN})
	o.qlogOn.Store(true)
}

// QueryLog returns the query log's configuration.
func (o *Observer) QueryLog() QueryLogConfig {
	if ql := o.qlog.Load(); ql != nil {
		return ql.cfg
	}
	return QueryLogConfig{}
}

// matches reports whether the answer falls in one of l's classes.
func (l *queryLogger) matches(rcode int, upErr error) bool {
	c := l.cfg.Classes
	switch {
	case c&LogAll != 0:
		return true
	case upErr != nil && c&LogUpstreamError != 0:
		return true
	case rcode == dns.RcodeNameError:
		return c&LogNXDomain != 0
	case rcode == dns.RcodeServerFailure:
		return c&LogServFail != 0
	}
	return false
}

// admit applies the sampling and then the rate cap.
func (l *queryLogger) admit() queryLogOutcome {
	if l.cfg.Sample > 1 && l.intN(l.cfg.Sample) != 0 {
		return qlSampledOut
	}
	if l.cfg.Rate > 0 {
		sec := l.now().Unix()
		if old := l.second.Load(); old != sec && l.second.CompareAndSwap(old, sec) {
			l.lines.Store(0)
		}
		if l.lines.Add(1) > int64(l.cfg.Rate) {
			return qlRateLimited
		}
	}
	return qlWritten
}

// write logs one answer, the reply out, if it matches, is sampled and
// within the rate.
func (l *queryLogger) write(o *Observer, oc *Outcome, elapsed time.Duration) {
	upErr, rcode, src := oc.UpErr, oc.Rcode, oc.Source
	denied := oc.Verdict.Denied()
	if !l.matches(rcode, upErr) && !(denied && l.cfg.Classes&LogDenied != 0) {
		return
	}
	res := l.admit()
	l.m.queryLog[res].Inc()
	if res != qlWritten {
		return
	}
	if l.out != nil {
		l.tap(o, oc, elapsed)
	}
	if !l.log.Enabled(context.Background(), slog.LevelInfo) {
		return
	}
	attrs := []slog.Attr{
		slog.String("qname", wireName(oc.Query.Name())),
		slog.String("qtype", dns.Type(oc.Query.QType).String()),
		slog.String("rcode", rcodeString(rcode)),
		slog.String("source", sourceNames[src]),
		slog.String("protocol", oc.Protocol.String()),
		slog.Duration("duration", elapsed),
	}
	if oc.Upstream != "" && src == SourceUpstream {
		attrs = append(attrs, slog.String("upstream", oc.Upstream))
	}
	if upErr != nil {
		attrs = append(attrs, slog.String("err", upErr.Error()))
	}
	if denied {
		attrs = appendPolicyAttrs(attrs, oc)
	}
	l.log.LogAttrs(context.Background(), slog.LevelInfo, "dns query", attrs...)
}

func rcodeString(rc int) string {
	if s, ok := dns.RcodeToString[rc]; ok {
		return s
	}
	return fmt.Sprint(rc)
}
