package server

import (
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshdns/meshdns/controlplane/view"
)

// Crash reports and quarantine. An agent whose process died applying or
// serving a version within its probation restores its last good version
// and reports the one it died on: in rejected_version of the first request
// of its next stream, or as a NACK with code ABORTED on a live one. Once
// enough agents of a view report its current table, that table is
// quarantined: agents that were not sent it are held at the version
// before it; those that were keep it (they run it, or crash and report).
// The view's next version lifts the quarantine and goes to everyone.
//
// Only the table part of a version ("table+settings") is quarantined:
// the table is what a view shares, and holding it back is holding one
// immutable version the view keeps. A report blames the table when it
// differs from the one the agent kept; a report whose table is the kept
// one blames the settings, which is counted and logged but holds nothing
// back: settings are composed per agent and the server keeps no older
// ones (an agent refuses settings it cannot run on its own).
//
// Each replica counts the reports of its own streams: the control plane
// is stateless, so a replica quarantines on what its agents saw.

// codeAborted is error_detail.code of a crash report (google.rpc.Code
// ABORTED).
const codeAborted = 10

// Blame labels of meshdns_controlplane_crash_nacks_total.
const (
	blameTable    = "table"
	blameSettings = "settings"
	blameBoth     = "both"
)

// quarantine tracks the crash reports of each view's current table.
type quarantine struct {
	minAgents int
	fraction  float64
	// active counts the suspects quarantined, so a send skips the lock
	// while nothing is.
	active atomic.Int32

	// mu guards following. Lock order: an agent's mu, then mu, then
	// Server.mu (report counts a view's agents with mu held).
	mu     sync.Mutex              // guards following
	byView map[*view.View]*suspect // the view's current table, once reported

	// gone reports whether a view is gone: no agent of this replica on
	// it and the store no longer serves it (it drops views idle for its
	// IdleTTL). Called without mu: it takes the store's lock, which is
	// held while agents are woken (whose senders take mu); nil keeps
	// every view.
	gone func(*view.View) bool
}

// suspect is a view's table that agents reported crashing on.
type suspect struct {
	id        string              // the table's version ID
	agents    map[string]struct{} // the agents that reported it (namespace/pod)
	reason    string              // the last report's message
	lastAgent string
	// good is the version agents are held at once quarantined, or nil
	// (not quarantined, or the table is the view's first).
	good        *view.Version
	quarantined bool
	since       time.Time
}

func newQuarantine(minAgents int, fraction float64) *quarantine {
	return &quarantine{minAgents: minAgents, fraction: fraction, byView: map[*view.View]*suspect{}}
}

// threshold is how many agents of a view of n agents must report a table
// to quarantine it.
func (q *quarantine) threshold(n int) int {
	return max(q.minAgents, int(math.Ceil(q.fraction*float64(n))))
}

// heldAt returns the version to send instead of cur, the current version
// of v, when cur is quarantined; else nil. On every send: no lock while
// nothing is quarantined.
func (q *quarantine) heldAt(v *view.View, cur *view.Version) *view.Version {
	if q.active.Load() == 0 {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	sp := q.byView[v]
	switch {
	case sp == nil:
		return nil
	case sp.id != cur.ID:
		// The view moved on: the first send after it lifts the
		// quarantine, so a table that comes back later is sent again.
		if sp.quarantined {
			q.active.Add(-1)
		}
		delete(q.byView, v)
		return nil
	case sp.quarantined:
		return sp.good
	}
	return nil
}

// isQuarantined reports whether table id of v is quarantined now.
func (q *quarantine) isQuarantined(v *view.View, id string) bool {
	if q.active.Load() == 0 {
		return false
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	sp := q.byView[v]
	return sp != nil && sp.quarantined && sp.id == id
}

// report records that agent (namespace/pod) crashed running table id of
// v; agents counts the view's agents, asked only when the reports reach
// the minimum (a reconnect storm of reports must not count every stream
// for each). It returns the suspect's state when this report quarantined
// it, else nil.
func (q *quarantine) report(v *view.View, id, agent, reason string, agents func() int, now time.Time) *QuarantineInfo {
	q.pruneGone()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pruneLocked()
	cur := v.Current()
	if cur == nil || cur.ID != id {
		return nil // not what the view serves: nothing to hold back
	}
	sp := q.byView[v]
	if sp == nil || sp.id != id {
		if sp != nil && sp.quarantined {
			q.active.Add(-1)
		}
		sp = &suspect{id: id, agents: map[string]struct{}{}}
		q.byView[v] = sp
	}
	sp.agents[agent] = struct{}{}
	sp.reason, sp.lastAgent = reason, agent
	if sp.quarantined || len(sp.agents) < q.minAgents {
		return nil
	}
	n := agents()
	if len(sp.agents) < q.threshold(n) {
		return nil
	}
	sp.quarantined, sp.since = true, now
	if prev := v.Previous(); prev != nil && prev.ID != id {
		sp.good = prev
	}
	q.active.Add(1)
	info := sp.info(v, q.threshold(n))
	return &info
}

// pruneGone forgets the suspects of views gone, which no later table
// would ever lift. Called without mu.
func (q *quarantine) pruneGone() {
	if q.gone == nil {
		return
	}
	q.mu.Lock()
	views := make([]*view.View, 0, len(q.byView))
	for v := range q.byView {
		views = append(views, v)
	}
	q.mu.Unlock()
	for _, v := range views {
		if !q.gone(v) {
			continue
		}
		q.mu.Lock()
		if sp := q.byView[v]; sp != nil {
			if sp.quarantined {
				q.active.Add(-1)
			}
			delete(q.byView, v)
		}
		q.mu.Unlock()
	}
}

// pruneLocked forgets the suspects their view moved past: a later table
// that differs lifts the quarantine.
func (q *quarantine) pruneLocked() {
	for v, sp := range q.byView {
		if cur := v.Current(); cur == nil || cur.ID != sp.id {
			if sp.quarantined {
				q.active.Add(-1)
			}
			delete(q.byView, v)
		}
	}
}

// list describes the suspects of the views' current tables; counts maps
// each view to its agents.
func (q *quarantine) list(counts map[*view.View]int) []QuarantineInfo {
	q.pruneGone()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pruneLocked()
	out := make([]QuarantineInfo, 0, len(q.byView))
	for v, sp := range q.byView {
		out = append(out, sp.info(v, q.threshold(counts[v])))
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].ClusterDomain < out[j].ClusterDomain
	})
	return out
}

// quarantined counts the quarantined tables that are still current.
func (q *quarantine) quarantined() int {
	q.pruneGone()
	q.mu.Lock()
	defer q.mu.Unlock()
	q.pruneLocked()
	return int(q.active.Load())
}

func (sp *suspect) info(v *view.View, threshold int) QuarantineInfo {
	in := QuarantineInfo{
		Namespace: v.Key().Namespace, ClusterDomain: v.Key().ClusterDomain, Version: sp.id,
		Reports: len(sp.agents), Threshold: threshold, Quarantined: sp.quarantined,
		Reason: sp.reason, LastAgent: sp.lastAgent,
	}
	if sp.quarantined {
		in.Since = sp.since
		if sp.good != nil {
			in.HeldAt = sp.good.ID
		}
	}
	return in
}

// QuarantineInfo describes a view's current table that agents reported
// crashing on, for /debug/quarantine.
type QuarantineInfo struct {
	// Namespace and ClusterDomain are the view's key: Namespace is ""
	// for the view shared by the namespaces no name is restricted to.
	Namespace     string `json:"namespace"`
	ClusterDomain string `json:"clusterDomain,omitempty"`
	// Version is the table's version (the part of a version before "+").
	Version string `json:"version"`
	// Reports counts the agents that reported crashing on it; Threshold
	// is how many quarantine it (QuarantineMinAgents, or
	// QuarantineFraction of the view's agents if more).
	Reports   int `json:"reports"`
	Threshold int `json:"threshold"`
	// Quarantined: it is sent only to agents that were sent it before.
	Quarantined bool `json:"quarantined"`
	// HeldAt is the version the other agents are held at; "" when the
	// table is the first the view built (they get it).
	HeldAt string    `json:"heldAt,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	// Reason is the last report's error message, LastAgent its agent.
	Reason    string `json:"reason"`
	LastAgent string `json:"lastAgent"`
}

// Quarantine lists the views' current tables agents reported crashing on,
// quarantined or not yet, sorted by namespace.
func (s *Server) Quarantine() []QuarantineInfo {
	return s.quar.list(s.viewAgents())
}

// viewAgents counts the connected agents of each view.
func (s *Server) viewAgents() map[*view.View]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := map[*view.View]int{}
	for a := range s.agents {
		if a.sub != nil {
			n[a.sub.View()]++
		}
	}
	return n
}

// crashed handles a's report that it crashed running version rejected
// ("table+settings") and restored kept; reason is its error message.
func (s *Server) crashed(a *agent, rejected, kept, reason string) {
	table, settings := splitVersion(rejected)
	keptTable, keptSettings := splitVersion(kept)
	blame := blameTable
	switch {
	case table == keptTable:
		blame = blameSettings
	case settings != keptSettings:
		blame = blameBoth
	}
	s.m.crashNacks.WithLabelValues(blame).Inc()
	log := a.logger(s.log)
	log.Warn("agent reported a crash running a version", "rejected", rejected, "kept", kept, "blame", blame, "err", reason)
	if blame == blameSettings {
		return
	}
	a.mu.Lock()
	a.rejected = table
	a.mu.Unlock()
	v := a.sub.View()
	count := func() int { return s.viewAgents()[v] }
	if in := s.quar.report(v, table, agentKey(a), reason, count, s.cfg.Now()); in != nil {
		s.roll.demote(v, in.Version, v.Previous())
		log.Error("version quarantined: agents crashed running it; holding the others at the version before it",
			"view", v.Key().String(), "version", in.Version, "reports", in.Reports, "threshold", in.Threshold,
			"held_at", in.HeldAt, "err", reason)
	}
}

// targetLocked is the version a sender brings a to: the current version
// of its view v, unless a was not sent it and it is quarantined, or a
// reported crashing on it; then the version before it (which a keeps,
// or gets a delta to). Either way no newer than the staged rollout
// released to a (rollout.go). unproven means a keeps the table it has:
// nothing is sent. Called with a.mu held.
func (s *Server) targetLocked(a *agent, v *view.View) *view.Version {
	cur := v.Current()
	if a.sentID == cur.ID {
		return cur // sent before: the agent runs it, or crashes and reports
	}
	return s.roll.pass(a, s.keptLocked(a, v, cur))
}

// keptLocked is targetLocked before the rollout: cur, or the version
// before it when cur is quarantined or a reported crashing on it (or,
// with none, unproven: a keeps the table it has).
func (s *Server) keptLocked(a *agent, v *view.View, cur *view.Version) *view.Version {
	if held := s.quar.heldAt(v, cur); held != nil {
		return held
	}
	if a.rejected == cur.ID {
		// Below the threshold, but this agent would only reject it.
		if prev := v.Previous(); prev != nil {
			return prev
		}
		if a.sentID != "" {
			return unproven // nothing older here: it keeps its own table
		}
	}
	return cur
}
