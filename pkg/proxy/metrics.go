package proxy

import (
	"fmt"
	"math"
	"sort"
	"sync/atomic"
	"time"

	"github.com/miekg/dns"
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
	dropQueueFull                      // dropped by the kernel: a UDP socket's receive queue full (udpdrops.go)
	dropSendFailed                     // a reply the socket would not send
	nDropReasons
)

var dropReasonNames = [nDropReasons]string{"malformed", "tcp_limit", "tcp_reclaimed", "queue_full", "send_failed"}

// proxyMetrics are the serving metrics; see README.md. Every series is an
// atomic in an array indexed by small enums, so counting a query is one
// atomic add and allocates nothing.
type proxyMetrics struct {
	requests  [nProtocols][nQtypes][nRcodes][nSources]atomic.Uint64
	duration  [nProtocols][nSources]histogram
	dropped   [nProtocols][nDropReasons]atomic.Uint64
	truncated [nProtocols]atomic.Uint64
	tcpConns  atomic.Int64
	answerDur [nProtocols][nSources][nAnswerRcodes]durHistogram
	respSize  [nProtocols]sizeHistogram
	queryLog  [nQueryLogOutcomes]atomic.Uint64
	// udpQueue reads the kernel's drops on the UDP sockets into
	// dropped[UDP][dropQueueFull].
	udpQueue udpQueueDrops
}

// durationBuckets: 10µs up to 2.6s (an upstream timing out).
var durationBuckets = exponentialBuckets(10e-6, 4, nDurationBuckets)

const nDurationBuckets = 10

func exponentialBuckets(start, factor float64, n int) []float64 {
	b := make([]float64, n)
	for i := range b {
		b[i] = start
		start *= factor
	}
	return b
}

func newMetrics(reg Registry, answers func() float64) (*proxyMetrics, error) {
	m := &proxyMetrics{}
	fs := []Family{{
		Name:   "meshdns_dns_requests_total",
		Help:   "DNS queries answered, by protocol, query type, response code and source of the answer.",
		Type:   CounterMetric,
		Labels: []string{"protocol", "qtype", "rcode", "source"},
		Collect: func(emit func(Series)) {
			for p := range nProtocols {
				for qt := range nQtypes {
					for rc := range nRcodes {
						for src := range nSources {
							emitCount(emit, &m.requests[p][qt][rc][src], protocolNames[p], qtypeNames[qt], rcodeNames[rc], sourceNames[src])
						}
					}
				}
			}
		},
	}, {
		Name:    "meshdns_dns_request_duration_seconds",
		Help:    "Time from reading a query that waited for the Resolver to having its reply, by protocol and source (cache, upstream); table answers and cache hits served without waiting are not timed.",
		Type:    HistogramMetric,
		Labels:  []string{"protocol", "source"},
		Buckets: durationBuckets,
		Collect: func(emit func(Series)) {
			for p := range nProtocols {
				for src := range nSources {
					m.duration[p][src].collect(emit, protocolNames[p], sourceNames[src])
				}
			}
		},
	}, {
		Name:    "meshdns_dns_answer_duration_seconds",
		Help:    "Time from reading a query to having its reply, every answer (table answers and cache hits sampled and weighted), by protocol, source and rcode class.",
		Type:    HistogramMetric,
		Labels:  []string{"protocol", "source", "rcode_class"},
		Buckets: answerDurationBuckets,
		Collect: func(emit func(Series)) {
			for p := range nProtocols {
				for src := range nSources {
					for rc := range nAnswerRcodes {
						m.answerDur[p][src][rc].collect(emit, protocolNames[p], sourceNames[src], answerRcodeNames[rc])
					}
				}
			}
		},
	}, {
		Name:    "meshdns_dns_response_size_bytes",
		Help:    "Size of the replies sent, by protocol (sampled like the answer durations).",
		Type:    HistogramMetric,
		Labels:  []string{"protocol"},
		Buckets: responseSizeBuckets,
		Collect: func(emit func(Series)) {
			for p := range nProtocols {
				m.respSize[p].collect(emit, protocolNames[p])
			}
		},
	}, {
		Name:   "meshdns_dns_query_log_lines_total",
		Help:   "Answers the query log's classes matched, by outcome: written, sampled_out, rate_limited.",
		Type:   CounterMetric,
		Labels: []string{"outcome"},
		Collect: func(emit func(Series)) {
			for o := range nQueryLogOutcomes {
				emitCount(emit, &m.queryLog[o], queryLogOutcomeNames[o])
			}
		},
	}, {
		Name:   "meshdns_dns_dropped_total",
		Help:   "Queries, packets or connections dropped without a reply, by protocol and reason (malformed, tcp_limit, tcp_reclaimed, queue_full, send_failed).",
		Type:   CounterMetric,
		Labels: []string{"protocol", "reason"},
		Collect: func(emit func(Series)) {
			m.udpQueue.sample(&m.dropped[UDP][dropQueueFull])
			for p := range nProtocols {
				for r := range nDropReasons {
					emitCount(emit, &m.dropped[p][r], protocolNames[p], dropReasonNames[r])
				}
			}
		},
	}, {
		Name:   "meshdns_dns_truncated_responses_total",
		Help:   "Replies truncated to the client's size with TC set, by protocol.",
		Type:   CounterMetric,
		Labels: []string{"protocol"},
		Collect: func(emit func(Series)) {
			for p := range nProtocols {
				emitCount(emit, &m.truncated[p], protocolNames[p])
			}
		},
	}, {
		Name: "meshdns_dns_tcp_connections",
		Help: "Open client TCP connections.",
		Type: GaugeMetric,
		Collect: func(emit func(Series)) {
			emit(Series{Value: float64(m.tcpConns.Load())})
		},
	}, {
		Name: "meshdns_dns_answer_cache_entries",
		Help: "Questions of the current table whose answers are kept precomputed.",
		Type: GaugeMetric,
		Collect: func(emit func(Series)) {
			emit(Series{Value: answers()})
		},
	}}
	for _, f := range fs {
		if err := reg.Register(f); err != nil {
			return nil, fmt.Errorf("register proxy metrics: %w", err)
		}
	}
	return m, nil
}

// emitCount emits a counter's series once it has counted something.
func emitCount(emit func(Series), c *atomic.Uint64, labelValues ...string) {
	if n := c.Load(); n > 0 {
		emit(Series{LabelValues: labelValues, Value: float64(n)})
	}
}

// histogram counts observations by bucket of durationBuckets (the last
// for +Inf) without a lock; sum holds the float64 bits of their sum.
type histogram struct {
	counts [nDurationBuckets + 1]atomic.Uint64
	sum    atomic.Uint64
}

func (h *histogram) observe(v float64) {
	h.counts[sort.SearchFloat64s(durationBuckets, v)].Add(1)
	for {
		old := h.sum.Load()
		if h.sum.CompareAndSwap(old, math.Float64bits(math.Float64frombits(old)+v)) {
			return
		}
	}
}

// collect emits h once it has an observation, with cumulative counts.
func (h *histogram) collect(emit func(Series), labelValues ...string) {
	var cum [nDurationBuckets + 1]uint64
	var n uint64
	for i := range h.counts {
		n += h.counts[i].Load()
		cum[i] = n
	}
	if n > 0 {
		emit(Series{LabelValues: labelValues, Counts: cum[:], Sum: math.Float64frombits(h.sum.Load())})
	}
}

// observe counts one answered query. waited says it waited for the
// Resolver (the older request duration histogram); weight > 0 that it was
// timed and stands for weight answers in the answer histograms.
func (m *proxyMetrics) observe(p Protocol, qtype uint16, rcode int, src source, waited bool, weight uint32, elapsed time.Duration, size int) {
	qt, rc := classifyQtype(qtype), classifyRcode(rcode)
	m.requests[p][qt][rc][src].Add(1)
	if waited {
		m.duration[p][src].observe(elapsed.Seconds())
	}
	if weight > 0 {
		m.answerDur[p][src][classifyAnswerRcode(rcode)].observe(uint64(max(elapsed, 0)), uint64(weight))
		m.respSize[p].observe(uint64(size), uint64(weight))
	}
}

func (m *proxyMetrics) drop(p Protocol, r dropReason) { m.dropped[p][r].Add(1) }

func (m *proxyMetrics) truncate(p Protocol) { m.truncated[p].Add(1) }
