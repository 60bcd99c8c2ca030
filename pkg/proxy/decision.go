package proxy

import (
	"log/slog"
	"sync/atomic"

	"github.com/meshdns/meshdns/pkg/nametable"
	"github.com/meshdns/meshdns/pkg/proxy/observe"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// decider is the decide stage: what it reads to settle a query. A
// Handler embeds it.
type decider struct {
	resolver Resolver
	log      *slog.Logger
	// obs is the observer, asked only whether a Tap wants the upstream
	// exchanges noted.
	obs *observe.Observer
	// zone is the cluster domain in lowercased wire form.
	zone []byte
	// search is the pod's search list, for judging expansions under a
	// policy (judge.go).
	search []string
	// state is the current table with its answer cache; never nil. Each
	// query loads it once, so a swap never waits for queries.
	state atomic.Pointer[tableState]
}

// action is what the decide stage settled on.
type action uint8

const (
	// actReply: out holds a reply (a table answer, a Resolver's, a chased
	// ExternalName's) for the reply stage to patch and finish.
	actReply action = iota
	// actMadeUp: the proxy makes the reply up with Rcode (a denial, a
	// failed Resolver, SERVFAIL before the first table).
	actMadeUp
	// actWait: the query waits for the Resolver (Handler.resolve).
	actWait
)

// decision is the decide stage's one outcome for a query, read by the
// reply stage and handed to the observer. Its Outcome holds what the
// observer needs (rcode, source, policy verdict, upstream or its error,
// timing); the rest is how to reply and what a query that waits carries to
// the worker that resolves it.
type decision struct {
	observe.Outcome
	act action
	out []byte
	// pol, zoneAllowed and ownsCluster are those of the table state the
	// query loaded: a query sees the names and the policy of one version.
	pol                      *Policy
	zoneAllowed, ownsCluster bool
	// chase is the ExternalName to chase, or nil; probe the Resolver's
	// note on its cache miss (a stale entry for serve-stale).
	chase *nametable.Result
	probe upstream.Probe
}

// reply settles on out, a reply with rcode from src.
func (d *decision) reply(out []byte, rcode int, src observe.Source) {
	d.act, d.out, d.Rcode, d.Source = actReply, out, rcode, src
}

// madeUp settles on a reply the proxy makes up with rcode.
func (d *decision) madeUp(rcode int, src observe.Source) {
	d.act, d.Rcode, d.Source = actMadeUp, rcode, src
}
