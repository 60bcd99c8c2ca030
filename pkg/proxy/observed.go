package proxy

import "github.com/meshdns/meshdns/pkg/proxy/observe"

// What the proxy's callers configure of its observer (pkg/proxy/observe),
// under the names they have always used.

// Protocol is the transport a query came in on.
type Protocol = observe.Protocol

const (
	UDP = observe.UDP
	TCP = observe.TCP
)

// QueryLogClass is a set of answers the query log writes.
type QueryLogClass = observe.QueryLogClass

const (
	LogDenied        = observe.LogDenied
	LogNXDomain      = observe.LogNXDomain
	LogServFail      = observe.LogServFail
	LogUpstreamError = observe.LogUpstreamError
	LogAll           = observe.LogAll
)

// ParseQueryLogClasses parses a comma-separated list of class names
// (denied, nxdomain, servfail, upstream_error, all); "" and "off" are none.
func ParseQueryLogClasses(s string) (QueryLogClass, error) { return observe.ParseQueryLogClasses(s) }

// QueryLogConfig says which answers the query log writes; see
// observe.QueryLogConfig.
type QueryLogConfig = observe.QueryLogConfig

// Tap receives the answers the query log writes; see observe.Tap.
type Tap = observe.Tap

// TapAnswer is one answer handed to a Tap.
type TapAnswer = observe.TapAnswer

// FailingNames counts failing answers per (name, rcode); see
// observe.FailingNames.
type FailingNames = observe.FailingNames

// FailingName is one name that failed in a window.
type FailingName = observe.FailingName

// Bounds of the failing-names summary.
const (
	DefaultFailingTopN = observe.DefaultFailingTopN
	MaxFailingTopN     = observe.MaxFailingTopN
)

// NewFailingNames returns an empty summary that reports topN names
// (DefaultFailingTopN when topN <= 0, at most MaxFailingTopN).
func NewFailingNames(topN int) *FailingNames { return observe.NewFailingNames(topN) }

// PolicyVerdict says how the policy judged a query (Explain).
type PolicyVerdict = observe.PolicyVerdict
