package observe

import (
	"net/netip"
	"time"

	"github.com/meshdns/meshdns/internal/dnswire"
	"github.com/meshdns/meshdns/pkg/policy"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// Outcome is what became of one query: the proxy's decide and reply
// stages fill it, and Observe reads it once the reply is ready. It is
// built on the answering goroutine's stack and read only during Observe.
type Outcome struct {
	// Query is the query as parsed; its question is empty (QEnd 0) for a
	// FORMERR.
	Query    *dnswire.Query
	Protocol Protocol
	// Rcode and Source say what answered and how; Reply is the reply as
	// sent (after truncation), which Truncated says happened.
	Rcode     int
	Source    Source
	Reply     []byte
	Truncated bool
	// Timing is when the query was read, as Begin and Wait set it.
	Timing Timing
	// Verdict is what a DNS policy said, and Policy describes it for the
	// query log (nil without a policy).
	Verdict Verdict
	Policy  Describer
	// Upstream is the address of the upstream that answered, when the
	// Resolver says, else ""; UpErr the Resolver's error when the reply is
	// made up for lack of an answer.
	Upstream string
	UpErr    error
	// Probe is the Resolver's note on a cache miss, for the Tap's
	// upstream exchange; nil for other answers.
	Probe *upstream.Probe
	// Addrs are the query's addresses, nil when unknown (through the
	// proxy's Handler.Serve).
	Addrs *Addrs
}

// Addrs are the addresses of a query: Client sent it, Server (the proxy's
// socket) received it.
type Addrs struct {
	Client, Server netip.AddrPort
}

// Timing is when a query was read and how many answers its duration
// stands for.
type Timing struct {
	// Start is the observer's clock when the query was read, 0 when it
	// was not timed.
	Start time.Duration
	// Weight is how many answers this one's time stands for (0: not
	// counted in the answer histograms); Waited that the query waited for
	// the Resolver (every such query is timed).
	Weight uint32
	Waited bool
}

// Verdict is what a DNS policy said about one query.
type Verdict struct {
	Judged bool
	// FromTable: the question name was judged as a table name.
	FromTable bool
	Decision  policy.Decision
	// Chain is the CNAME target that was denied, "" when the question
	// name decided (set on the denial path only: it allocates).
	Chain string
}

// Denied reports whether the policy denied the query (also in audit
// mode, where it is answered as allowed).
func (v *Verdict) Denied() bool { return v.Judged && v.Decision.Action == policy.Deny }

// Describer names the rule behind a Verdict: the proxy's compiled policy,
// which knows its rules' patterns and sources.
type Describer interface {
	Describe(v Verdict) PolicyVerdict
}

// PolicyVerdict says how the policy judged a query (the query log's
// lines and the proxy's Explain).
type PolicyVerdict struct {
	// Judged is false when no policy applied (none set, or the query was
	// answered before a name was judged).
	Judged bool `json:"judged"`
	// Action is "allow" or "deny"; Mode "enforce" or "audit" (a denial in
	// audit mode is answered as allowed).
	Action string `json:"action,omitempty"`
	Mode   string `json:"mode,omitempty"`
	// Rule is the deciding rule's pattern and Source the object it came
	// from; when no rule matched Rule is "" and Default names the default
	// that decided: "table_default" or "outside_default".
	Rule    string `json:"rule,omitempty"`
	Source  string `json:"source,omitempty"`
	Default string `json:"default,omitempty"`
	// Expansion: the name the pod meant under its search path denied a
	// name its default allowed as written.
	Expansion bool `json:"expansion,omitempty"`
	// Chain is the CNAME target of a forwarded answer that was denied.
	Chain string `json:"chain,omitempty"`
}
