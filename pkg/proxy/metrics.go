package proxy

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/metrics"
)

// Metric labels are small enums so the hot path indexes arrays instead of
// building label strings (WithLabelValues locks and allocates).

// Protocol is the transport a query came in on.
type Protocol uint8

const (
	UDP Protocol = iota
	TCP
	nProtocols
)

var protocolNames = [nProtocols]string{"udp", "tcp"}

func (p Protocol) String() string {
	if p < nProtocols {
		return protocolNames[p]
	}
	return "unknown"
}

// source says who produced an answer.
type source uint8

const (
	srcTable    source = iota // the name table (precomputed answers)
	srcCache                  // the Resolver's cache
	srcUpstream               // an upstream server
	srcLocal                  // the proxy itself: FORMERR, NOTIMP, BADVERS, overload
	nSources
)

var sourceNames = [nSources]string{"table", "cache", "upstream", "local"}

// qtypeClass buckets query types into a fixed label set.
type qtypeClass uint8

const (
	qtA qtypeClass = iota
	qtAAAA
	qtSRV
	qtPTR
	qtOther
	nQtypes
)

var qtypeNames = [nQtypes]string{"A", "AAAA", "SRV", "PTR", "other"}

func classifyQtype(t uint16) qtypeClass {
	switch t {
	case dns.TypeA:
		return qtA
	case dns.TypeAAAA:
		return qtAAAA
	case dns.TypeSRV:
		return qtSRV
	case dns.TypePTR:
		return qtPTR
	}
	return qtOther
}

// rcodeClass buckets response codes into a fixed label set.
type rcodeClass uint8

const (
	rcNoError rcodeClass = iota
	rcFormErr
	rcServFail
	rcNXDomain
	rcNotImp
	rcRefused
	rcBadVers
	rcOther
	nRcodes
)

var rcodeNames = [nRcodes]string{"NOERROR", "FORMERR", "SERVFAIL", "NXDOMAIN", "NOTIMP", "REFUSED", "BADVERS", "other"}

func classifyRcode(rc int) rcodeClass {
	switch rc {
	case dns.RcodeSuccess:
		return rcNoError
	case dns.RcodeFormatError:
		return rcFormErr
	case dns.RcodeServerFailure:
		return rcServFail
	case dns.RcodeNameError:
		return rcNXDomain
	case dns.RcodeNotImplemented:
		return rcNotImp
	case dns.RcodeRefused:
		return rcRefused
	case dns.RcodeBadVers:
		return rcBadVers
	}
	return rcOther
}

// dropReason says why a packet got no reply.
type dropReason uint8

const (
	dropMalformed    dropReason = iota // shorter than a header, or a response
	dropTCPLimit                       // a TCP connection beyond MaxTCPConns, every one busy
	dropTCPReclaimed                   // an idle TCP connection closed to admit a new one
	nDropReasons
)

var dropReasonNames = [nDropReasons]string{"malformed", "tcp_limit", "tcp_reclaimed"}

// lazyCounter resolves its label values on first use, so unused label
// combinations do not show up as zero series.
type lazyCounter struct {
	c atomic.Pointer[metrics.Counter]
}

func (l *lazyCounter) get(vec *metrics.CounterVec, lvs ...string) *metrics.Counter {
	if c := l.c.Load(); c != nil {
		return c
	}
	c := vec.WithLabelValues(lvs...)
	l.c.Store(c)
	return c
}

type lazyObserver struct {
	o atomic.Pointer[metrics.Histogram]
}

func (l *lazyObserver) get(vec *metrics.HistogramVec, lvs ...string) *metrics.Histogram {
	if o := l.o.Load(); o != nil {
		return o
	}
	o := vec.WithLabelValues(lvs...)
	l.o.Store(o)
	return o
}

// proxyMetrics are the serving metrics; see README.md.
type proxyMetrics struct {
	requestsVec  *metrics.CounterVec
	requests     [nProtocols][nQtypes][nRcodes][nSources]lazyCounter
	durationVec  *metrics.HistogramVec
	duration     [nProtocols][nSources]lazyObserver
	droppedVec   *metrics.CounterVec
	dropped      [nProtocols][nDropReasons]lazyCounter
	truncatedVec *metrics.CounterVec
	truncated    [nProtocols]lazyCounter
	tcpConns     *metrics.Gauge
}

func newMetrics(reg *metrics.Registry, answers func() float64) (*proxyMetrics, error) {
	m := &proxyMetrics{
		requestsVec: metrics.NewCounterVec(metrics.Opts{
			Name: "meshdns_dns_requests_total",
			Help: "DNS queries answered, by protocol, query type, response code and source of the answer.",
		}, []string{"protocol", "qtype", "rcode", "source"}),
		durationVec: metrics.NewHistogramVec(metrics.HistogramOpts{
			Name: "meshdns_dns_request_duration_seconds",
			Help: "Time from reading a query that waited for the Resolver to having its reply, by protocol and source (cache, upstream); table answers and cache hits served without waiting are not timed.",
			// 10µs up to 2.6s (an upstream timing out).
			Buckets: metrics.ExponentialBuckets(10e-6, 4, 10),
		}, []string{"protocol", "source"}),
		droppedVec: metrics.NewCounterVec(metrics.Opts{
			Name: "meshdns_dns_dropped_total",
			Help: "Packets or connections dropped without a reply, by protocol and reason.",
		}, []string{"protocol", "reason"}),
		truncatedVec: metrics.NewCounterVec(metrics.Opts{
			Name: "meshdns_dns_truncated_responses_total",
			Help: "Replies truncated to the client's size with TC set, by protocol.",
		}, []string{"protocol"}),
		tcpConns: metrics.NewGauge(metrics.Opts{
			Name: "meshdns_dns_tcp_connections",
			Help: "Open client TCP connections.",
		}),
	}
	cs := []metrics.Collector{m.requestsVec, m.durationVec, m.droppedVec, m.truncatedVec, m.tcpConns,
		metrics.NewGaugeFunc(metrics.Opts{
			Name: "meshdns_dns_answer_cache_entries",
			Help: "Questions of the current table whose answers are kept precomputed.",
		}, answers),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register proxy metrics: %w", err)
		}
	}
	return m, nil
}

// observe counts one answered query.
func (m *proxyMetrics) observe(p Protocol, qtype uint16, rcode int, src source, timed bool, elapsed time.Duration) {
	qt, rc := classifyQtype(qtype), classifyRcode(rcode)
	m.requests[p][qt][rc][src].get(m.requestsVec, protocolNames[p], qtypeNames[qt], rcodeNames[rc], sourceNames[src]).Inc()
	if timed {
		m.duration[p][src].get(m.durationVec, protocolNames[p], sourceNames[src]).Observe(elapsed.Seconds())
	}
}

func (m *proxyMetrics) drop(p Protocol, r dropReason) {
	m.dropped[p][r].get(m.droppedVec, protocolNames[p], dropReasonNames[r]).Inc()
}

func (m *proxyMetrics) truncate(p Protocol) {
	m.truncated[p].get(m.truncatedVec, protocolNames[p]).Inc()
}
