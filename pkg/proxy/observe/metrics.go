package observe

import (
	"fmt"
	"time"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/pkg/metric"
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

// Source says who produced an answer.
type Source uint8

const (
	SourceTable    Source = iota // the name table (precomputed answers)
	SourceCache                  // the Resolver's cache
	SourceUpstream               // an upstream server
	SourceLocal                  // the proxy itself: FORMERR, NOTIMP, BADVERS, overload
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

// DropReason says why a packet got no reply.
type DropReason uint8

const (
	DropMalformed    DropReason = iota // shorter than a header, or a response
	DropTCPLimit                       // a TCP connection beyond MaxTCPConns, every one busy
	DropTCPReclaimed                   // an idle TCP connection closed to admit a new one
	DropQueueFull                      // dropped by the kernel: a UDP socket's receive queue full (udpdrops.go)
	DropSendFailed                     // a reply the socket would not send
	nDropReasons
)

var dropReasonNames = [nDropReasons]string{"malformed", "tcp_limit", "tcp_reclaimed", "queue_full", "send_failed"}

// metrics are the serving metrics; see README.md. Every series is a
// pkg/metric series in an array indexed by small enums, so counting a
// query is one atomic add and allocates nothing.
type metrics struct {
	requests  [nProtocols][nQtypes][nRcodes][nSources]metric.Counter
	duration  [nProtocols][nSources]*metric.Histogram
	dropped   [nProtocols][nDropReasons]metric.Counter
	truncated [nProtocols]metric.Counter
	tcpConns  metric.Gauge
	answerDur [nProtocols][nSources][nAnswerRcodes]*metric.Pow2Histogram
	respSize  [nProtocols]*metric.Pow2Histogram
	queryLog  [nQueryLogOutcomes]metric.Counter
	// udpQueue reads the kernel's drops on the UDP sockets into
	// dropped[UDP][DropQueueFull].
	udpQueue udpQueueDrops
}

// durationBuckets: 10µs up to 2.6s (an upstream timing out).
var durationBuckets = metric.ExponentialBuckets(10e-6, 4, 10)

func newMetrics(reg metric.Registry, answers func() float64) (*metrics, error) {
	m := &metrics{}
	m.makeHistograms()
	fs := []metric.Family{{
		Name:   "meshdns_dns_requests_total",
		Help:   "DNS queries answered, by protocol, query type, response code and source of the answer.",
		Type:   metric.CounterType,
		Labels: []string{"protocol", "qtype", "rcode", "source"},
		Collect: func(emit func(metric.Series)) {
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
		Type:    metric.HistogramType,
		Labels:  []string{"protocol", "source"},
		Buckets: durationBuckets,
		Collect: func(emit func(metric.Series)) {
			for p := range nProtocols {
				for src := range nSources {
					emitObserved(emit, m.duration[p][src].Series(protocolNames[p], sourceNames[src]))
				}
			}
		},
	}, {
		Name:    "meshdns_dns_answer_duration_seconds",
		Help:    "Time from reading a query to having its reply, every answer (table answers and cache hits sampled and weighted), by protocol, source and rcode class.",
		Type:    metric.HistogramType,
		Labels:  []string{"protocol", "source", "rcode_class"},
		Buckets: answerDurationBuckets.Bounds(),
		Collect: func(emit func(metric.Series)) {
			for p := range nProtocols {
				for src := range nSources {
					for rc := range nAnswerRcodes {
						emitObserved(emit, m.answerDur[p][src][rc].Series(protocolNames[p], sourceNames[src], answerRcodeNames[rc]))
					}
				}
			}
		},
	}, {
		Name:    "meshdns_dns_response_size_bytes",
		Help:    "Size of the replies sent, by protocol (sampled like the answer durations).",
		Type:    metric.HistogramType,
		Labels:  []string{"protocol"},
		Buckets: responseSizeBuckets.Bounds(),
		Collect: func(emit func(metric.Series)) {
			for p := range nProtocols {
				emitObserved(emit, m.respSize[p].Series(protocolNames[p]))
			}
		},
	}, {
		Name:   "meshdns_dns_query_log_lines_total",
		Help:   "Answers the query log's classes matched, by outcome: written, sampled_out, rate_limited.",
		Type:   metric.CounterType,
		Labels: []string{"outcome"},
		Collect: func(emit func(metric.Series)) {
			for o := range nQueryLogOutcomes {
				emitCount(emit, &m.queryLog[o], queryLogOutcomeNames[o])
			}
		},
	}, {
		Name:   "meshdns_dns_dropped_total",
		Help:   "Queries, packets or connections dropped without a reply, by protocol and reason (malformed, tcp_limit, tcp_reclaimed, queue_full, send_failed).",
		Type:   metric.CounterType,
		Labels: []string{"protocol", "reason"},
		Collect: func(emit func(metric.Series)) {
			m.udpQueue.sample(&m.dropped[UDP][DropQueueFull])
			for p := range nProtocols {
				for r := range nDropReasons {
					emitCount(emit, &m.dropped[p][r], protocolNames[p], dropReasonNames[r])
				}
			}
		},
	}, {
		Name:   "meshdns_dns_truncated_responses_total",
		Help:   "Replies truncated to the client's size with TC set, by protocol.",
		Type:   metric.CounterType,
		Labels: []string{"protocol"},
		Collect: func(emit func(metric.Series)) {
			for p := range nProtocols {
				emitCount(emit, &m.truncated[p], protocolNames[p])
			}
		},
	}, {
		Name:    "meshdns_dns_tcp_connections",
		Help:    "Open client TCP connections.",
		Type:    metric.GaugeType,
		Collect: m.tcpConns.Collect,
	}, {
		Name: "meshdns_dns_answer_cache_entries",
		Help: "Questions of the current table whose answers are kept precomputed.",
		Type: metric.GaugeType,
		Collect: func(emit func(metric.Series)) {
			emit(metric.Series{Value: answers()})
		},
	}}
	for _, f := range fs {
		if err := reg.Register(f); err != nil {
			return nil, fmt.Errorf("register proxy metrics: %w", err)
		}
	}
	return m, nil
}

// makeHistograms makes every histogram series; the counters and the gauge
// are ready as zero values.
func (m *metrics) makeHistograms() {
	for p := range nProtocols {
		for src := range nSources {
			m.duration[p][src] = metric.NewHistogram(durationBuckets)
			for rc := range nAnswerRcodes {
				m.answerDur[p][src][rc] = metric.NewPow2Histogram(answerDurationBuckets)
			}
		}
		m.respSize[p] = metric.NewPow2Histogram(responseSizeBuckets)
	}
}

// emitCount emits a counter's series once it has counted something.
func emitCount(emit func(metric.Series), c *metric.Counter, labelValues ...string) {
	if n := c.Load(); n > 0 {
		emit(metric.Series{LabelValues: labelValues, Value: float64(n)})
	}
}

// emitObserved emits a histogram's series once it has an observation.
func emitObserved(emit func(metric.Series), s metric.Series) {
	if s.Counts[len(s.Counts)-1] > 0 {
		emit(s)
	}
}

// observe counts one answered query, elapsed after it was read. Waited
// says it waited for the Resolver (the older request duration histogram);
// a weight > 0 that it was timed and stands for weight answers in the
// answer histograms.
func (m *metrics) observe(oc *Outcome, elapsed time.Duration) {
	p, src, t := oc.Protocol, oc.Source, oc.Timing
	qt, rc := classifyQtype(oc.Query.QType), classifyRcode(oc.Rcode)
	m.requests[p][qt][rc][src].Inc()
	if t.Waited {
		m.duration[p][src].Observe(elapsed.Seconds())
	}
	if t.Weight > 0 {
		m.answerDur[p][src][classifyAnswerRcode(oc.Rcode)].Observe(uint64(max(elapsed, 0)), uint64(t.Weight))
		m.respSize[p].Observe(uint64(len(oc.Reply)), uint64(t.Weight))
	}
}

// String is the source's label value: table, cache, upstream or local.
func (s Source) String() string {
	if s < nSources {
		return sourceNames[s]
	}
	return "unknown"
}
