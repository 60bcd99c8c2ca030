package server

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/meshdns/meshdns/controlplane/view"
)

// Staged rollout. Without it a new version of a view reaches every
// connected agent within one fan-out, long before the first crash report
// can come back, so quarantine (quarantine.go) would only protect the
// agents that connect later. A gate per view sends a new version first to
// a few canaries, as many as the quarantine's threshold for the view's
// connected agents (min(threshold, connected)), and to the others only
// once every canary has ACKed it: a version that kills every agent
// reaches the threshold and no more, and the canaries' reports quarantine
// it. A healthy version costs the others one canary round trip.
//
// The canaries of a round are the first agents a sender brings to a
// version newer than the released one; the round lasts until the view's
// current version is released, so versions published meanwhile go to the
// same canaries. The others are held at the released version ("stable"):
// the newest version every canary has ACKed. A newer version supersedes
// a held one: the others go from what they hold straight to the newest
// proven version, and no change is lost, as a version is a whole table.
//
// A gate starts unproven: the first version a process serves a view
// (after a restart, or on a replica that starts fresh) may be one
// published while it was down, and has run nowhere this process knows
// of. Agents that connect reporting another table have something to
// lose: the first of them become the canaries of the current version,
// the others are held at what they have, sent nothing (the process does
// not have their version, so nothing older to hold them at), until the
// canaries ACK the current version; it then reaches them as a full
// table. While unproven a round's canaries are as many as the threshold
// for the view's agents connected at each canary's choice, not only at
// the round's first (they come back one by one after a restart): they
// grow to the threshold of the agents that come back, never past the
// threshold of the agents connected, and a release waits for all of
// them. New pods (no table at all) have nothing to fall back to: they
// get the current version at once and are no canaries; an agent that
// reports the current version keeps it. Before any agent with another
// table connected, the first ACK of the current version releases it (a
// view whose first agents are new pods is as proven as a new view ever
// is). When the canaries' reports quarantine a version while the view
// has no version before it, the held agents stay held; a later version
// goes to the canaries, then to them.
//
// A canary's verdict is its ACK. A canary whose stream ends with a
// version not ACKed may have died running it: its slot holds the others
// until the same pod reconnects (and reports the crash, or ACKs) or
// CanaryTimeout passes, after which another agent takes the slot. A
// canary that leaves having ACKed what it was sent, or whose pod is
// deleted, gives its slot up at once.

// rollout keeps the gate of each view.
type rollout struct {
	threshold func(n int) int // the quarantine's, for n agents
	timeout   time.Duration   // Config.CanaryTimeout
	// expired wakes the view's agents of a gate: called from a timer
	// when a gone canary's slot may be given up, and from a goroutine of
	// its own when an unproven round's canary slots grew while agents
	// wait.
	expired func(*gate)
	// timeouts counts the canaries given up after timeout.
	timeouts func()
	// quarantined reports whether table id of v is quarantined: a late
	// ACK of a canary must not release it. Called with a gate's mu held.
	quarantined func(v *view.View, id string) bool

	// mu guards following; nothing else is locked while it is held (a
	// gate's mu is taken after it is released, the store is asked
	// without it).
	mu     sync.Mutex
	byView map[*view.View]*gate
}

// gate holds one view's new versions back from all but its canaries.
type gate struct {
	v *view.View
	// stable is the newest version released to every agent of the view,
	// or unproven; read without mu on every send.
	stable atomic.Pointer[view.Version]
	// agents counts the view's connected agents.
	agents atomic.Int32
	// waiting is set while an agent may be held at its own table
	// (unproven): since the last one was, no slot was left free.
	waiting atomic.Bool

	// quarantined is rollout.quarantined.
	quarantined func(v *view.View, id string) bool

	mu       sync.Mutex // guards following. Lock order: an agent's mu, then mu, then quarantine.mu or podsGone.mu
	k        int        // canaries of the round; 0 between rounds
	canaries []*canary  // the round's, by the order they were chosen
	byAgent  map[*agent]*canary
}

// canary is one canary slot of a round.
type canary struct {
	key string // namespace/pod/claimedPod: a reconnecting pod takes its slot back
	a   *agent // nil once its stream ended
	// next is a newer stream of the same pod, opened before a's ended
	// (an agent restarted faster than its old connection was seen
	// closing), or nil: it takes the slot when a's stream ends.
	next *agent
	// sent is the newest version sent to it as a canary, or nil; acks
	// the versions it ACKed since, oldest first, the last maxAcks.
	sent  *view.Version
	acks  []*view.Version
	timer *time.Timer // while gone with a version not ACKed
}

// unproven is the released version of a gate none of whose versions was
// released yet, and the version pass and keptLocked return for an agent
// that is to keep the table it has: nothing is sent to it.
var unproven = &view.Version{}

// maxAcks bounds the versions a canary's ACKs are kept of: as many as a
// view's history, so a release looks no further back than a delta can.
const maxAcks = 16

// answered reports whether c ACKed everything it was sent.
func (c *canary) answered() bool {
	return c.sent == nil || len(c.acks) > 0 && c.acks[len(c.acks)-1].Seq >= c.sent.Seq
}

// ackedLocked reports whether c ACKed v itself.
func (c *canary) ackedLocked(v *view.Version) bool {
	for _, a := range c.acks {
		if a.ID == v.ID && a.Seq == v.Seq {
			return true
		}
	}
	return false
}

func newRollout(threshold func(int) int, timeout time.Duration) *rollout {
	return &rollout{threshold: threshold, timeout: timeout, byView: map[*view.View]*gate{}}
}

// agentKey names the pod a stream speaks for, across its reconnects.
func agentKey(a *agent) string { return a.namespace + "/" + a.pod + "/" + a.claimedPod }

// join attaches a to its view's gate, creating it unproven, and gives a
// back the slot of a canary of the same pod whose stream ended. gone
// reports whether a gate's view has been dropped by the store. Called
// before a's first send.
func (r *rollout) join(a *agent, gone func(*view.View) bool) {
	v := a.sub.View()
	r.mu.Lock()
	g := r.byView[v]
	if g == nil {
		r.mu.Unlock()
		r.prune(gone) // a new view: a good time to forget the old ones
		r.mu.Lock()
		g = r.byView[v]
	}
	if g == nil {
		g = &gate{v: v, byAgent: map[*agent]*canary{}, quarantined: r.quarantined}
		g.stable.Store(unproven)
		r.byView[v] = g
	}
	g.agents.Add(1)
	r.mu.Unlock()
	a.gate = g

	key := agentKey(a)
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, c := range g.canaries {
		switch {
		case c.key != key:
		case c.a == nil:
			c.a = a
			g.byAgent[a] = c
			if c.timer != nil {
				c.timer.Stop()
				c.timer = nil
			}
			return
		default:
			c.next = a
			return
		}
	}
}

// prune forgets the gates of views without agents that the store
// dropped. gone takes the store's lock, so it is asked without mu.
func (r *rollout) prune(gone func(*view.View) bool) {
	r.mu.Lock()
	var idle []*view.View
	for v, g := range r.byView {
		if g.agents.Load() == 0 {
			idle = append(idle, v)
		}
	}
	r.mu.Unlock()
	for _, v := range idle {
		if !gone(v) {
			continue
		}
		r.mu.Lock()
		if g := r.byView[v]; g != nil && g.agents.Load() == 0 {
			delete(r.byView, v)
		}
		r.mu.Unlock()
	}
}

// leave detaches a; final says the pod will not come back to this view
// (deleted, or moved to another view). deleted is asked, with the gate's
// mu held and a detached, whether a's pod was seen deleted since: a
// deletion told while a's stream was ending (no longer filed to be
// stopped, not yet detached here) is seen either by podGone, which finds
// the slot detached, or by deleted. It reports whether the view's agents
// must be looked at again: a version was released or a canary slot freed.
func (r *rollout) leave(a *agent, final bool, deleted func() bool) bool {
	g := a.gate
	if g == nil {
		return false
	}
	g.agents.Add(-1)
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.byAgent[a]
	if c == nil {
		for _, c := range g.canaries {
			if c.next == a {
				c.next = nil
			}
		}
		// One agent fewer may leave fewer slots to fill than were.
		return g.releaseLocked()
	}
	delete(g.byAgent, a)
	c.a = nil
	if n := c.next; n != nil {
		// The pod's newer stream carries on; it was held as any other
		// agent until now, so it must be looked at again.
		c.a, c.next = n, nil
		g.byAgent[n] = c
		return true
	}
	if final || c.answered() || deleted() {
		g.dropLocked(c)
		g.releaseLocked()
		return true // a slot to fill, or a release
	}
	// It may have died running what it was sent: hold until it reports.
	c.timer = time.AfterFunc(r.timeout, func() { r.expire(g, c) })
	return false
}

// podGone gives up the slots of the gone canaries of pod namespace/name
// (deleted: it will not report) and returns the gates that released a
// version or freed a slot. Called without locks held; it takes each
// gate's mu in turn.
func (r *rollout) podGone(namespace, name string) []*gate {
	prefix := namespace + "/" + name + "/"
	r.mu.Lock()
	gates := make([]*gate, 0, len(r.byView))
	for _, g := range r.byView {
		gates = append(gates, g)
	}
	r.mu.Unlock()
	var woke []*gate
	for _, g := range gates {
		g.mu.Lock()
		freed := false
		for _, c := range slices.Clone(g.canaries) {
			if c.a == nil && strings.HasPrefix(c.key, prefix) {
				g.dropLocked(c)
				freed = true
			}
		}
		if freed {
			g.releaseLocked()
			woke = append(woke, g)
		}
		g.mu.Unlock()
	}
	return woke
}

// expire gives up c's slot if it is still gone.
func (r *rollout) expire(g *gate, c *canary) {
	g.mu.Lock()
	if c.a != nil || !slices.Contains(g.canaries, c) {
		g.mu.Unlock()
		return
	}
	g.dropLocked(c)
	g.releaseLocked()
	g.mu.Unlock()
	if r.timeouts != nil {
		r.timeouts()
	}
	if r.expired != nil {
		r.expired(g)
	}
}

// dropLocked frees c's slot.
func (g *gate) dropLocked(c *canary) {
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	g.canaries = slices.DeleteFunc(g.canaries, func(o *canary) bool { return o == c })
}

// pass returns the version a may be sent instead of target: target when
// it is released or a is (or now becomes) a canary, else the released
// version (unproven: a keeps its table). Called with a.mu held, on every
// send, and never once a's stream ended: leave would not see the slot.
func (r *rollout) pass(a *agent, target *view.Version) *view.Version {
	g := a.gate
	if g == nil || target == unproven {
		return target
	}
	if st := g.stable.Load(); st == nil || st != unproven && target.Seq <= st.Seq {
		return target // the common case: no lock
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	st := g.stable.Load()
	switch {
	case st != unproven && target.Seq <= st.Seq:
		return target
	case st == unproven && a.sentID == "":
		return target // a new pod: nothing to fall back to
	}
	c := g.byAgent[a]
	if c == nil {
		if c = r.enlistLocked(g, a); c == nil {
			if st == unproven {
				g.waiting.Store(true)
			}
			return st
		}
	}
	if c.sent == nil || target.Seq > c.sent.Seq {
		c.sent = target
	}
	return target
}

// enlistLocked makes a a canary of g's round if a slot is free, and
// returns its slot or nil. A round's slots are set at its first pass,
// and while unproven grow with the view's agents: they come back one by
// one after a restart, and the canaries must be enough for their reports
// to quarantine a version that kills them.
func (r *rollout) enlistLocked(g *gate, a *agent) *canary {
	n := int(g.agents.Load())
	switch {
	case g.stable.Load() == unproven:
		g.k = max(g.k, r.threshold(n))
	case g.k == 0:
		g.k = max(1, min(r.threshold(n), n))
	}
	if len(g.canaries) >= g.k {
		return nil
	}
	key := agentKey(a)
	for _, c := range g.canaries {
		if c.key == key {
			// The pod holds a slot by an older stream not yet seen
			// ending: this one takes that slot then (join), not a second.
			return nil
		}
	}
	c := &canary{key: key, a: a}
	g.canaries = append(g.canaries, c)
	g.byAgent[a] = c
	if len(g.canaries) < g.k && g.stable.Load() == unproven && g.waiting.Swap(false) && r.expired != nil {
		// The slots grew past this agent while others wait at their
		// own tables: they take the next (those left over wait again).
		// A goroutine: a.mu is held, and waking takes the other agents'.
		go r.expired(g)
	}
	return c
}

// acked records that a applied ver and reports whether that released a
// version to the view's other agents.
func (r *rollout) acked(a *agent, ver *view.Version) bool {
	g := a.gate
	if g == nil {
		return false
	}
	if st := g.stable.Load(); st == nil || st.ID == g.v.Current().ID {
		return false // no round: nothing to prove
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	c := g.byAgent[a]
	if c == nil {
		g.provenLocked(ver)
		return false
	}
	if n := len(c.acks); n == 0 || ver.Seq > c.acks[n-1].Seq {
		if n == maxAcks {
			c.acks = append(c.acks[:0], c.acks[1:]...)
		}
		c.acks = append(c.acks, ver)
	}
	return g.releaseLocked()
}

// releaseLocked releases the newest version every canary of the round
// ACKed itself, once every slot of the round is taken; the round ends
// when that is the view's current version. A canary that ran a later
// version does not vouch for one it skipped (it may have crashed on it
// and been sent the later one since). It reports whether it released one.
func (g *gate) releaseLocked() bool {
	// Agents that left since the round began free their slots: a view
	// with fewer agents than slots releases once all of them ACKed.
	st := g.stable.Load()
	need := min(g.k, int(g.agents.Load()))
	if st == unproven {
		// Every slot: the agents that fill them are still coming back.
		need = g.k
	}
	if g.k == 0 || len(g.canaries) == 0 || len(g.canaries) < need {
		return false
	}
	first := g.canaries[0].acks
	for i := len(first) - 1; i >= 0 && first[i].Seq > st.Seq; i-- {
		v := first[i]
		if !g.ackedByAllLocked(v) || g.quarantined != nil && g.quarantined(g.v, v.ID) {
			continue
		}
		g.stable.Store(v)
		if v.ID == g.v.Current().ID {
			g.endRoundLocked()
		}
		return true
	}
	return false
}

// provenLocked releases ver, an unproven gate's current version that an
// agent other than a canary ACKed, when no round has begun: no agent
// with another table connected yet, so there is nobody to protect.
func (g *gate) provenLocked(ver *view.Version) {
	if g.stable.Load() != unproven || g.k != 0 || ver.ID != g.v.Current().ID ||
		g.quarantined != nil && g.quarantined(g.v, ver.ID) {
		return
	}
	g.stable.Store(ver)
}

// ackedByAllLocked reports whether every canary ACKed v.
func (g *gate) ackedByAllLocked(v *view.Version) bool {
	for _, c := range g.canaries[1:] {
		if !c.ackedLocked(v) {
			return false
		}
	}
	return true
}

// endRoundLocked forgets the round's canaries.
func (g *gate) endRoundLocked() {
	for _, c := range g.canaries {
		if c.timer != nil {
			c.timer.Stop()
		}
	}
	g.k, g.canaries = 0, nil
	clear(g.byAgent)
}

// demote takes the released version of v back to good when it is bad (a
// table just quarantined), so the agents held by a later round are held
// at a version nobody crashed on.
func (r *rollout) demote(v *view.View, bad string, good *view.Version) {
	r.mu.Lock()
	g := r.byView[v]
	r.mu.Unlock()
	if g == nil || good == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if st := g.stable.Load(); st != nil && st.ID == bad && good.Seq < st.Seq {
		g.stable.Store(good)
	}
}

// held counts the views whose current version is held back from all but
// their canaries (a view without agents holds nobody; an unproven one
// only while an agent may wait at its own table).
func (r *rollout) held() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for v, g := range r.byView {
		st := g.stable.Load()
		if g.agents.Load() > 0 && (st == unproven && g.waiting.Load() || st != unproven && st.ID != v.Current().ID) {
			n++
		}
	}
	return n
}

// wakeGate has a sender look at every agent of g's view: a version was
// released to them, or a canary slot is free.
func (s *Server) wakeGate(g *gate) {
	s.mu.Lock()
	as := make([]*agent, 0, len(s.agents))
	for a := range s.agents {
		if a.gate == g {
			as = append(as, a)
		}
	}
	s.mu.Unlock()
	for _, a := range as {
		s.wake(a)
	}
}

// connected counts v's connected agents.
func (r *rollout) connected(v *view.View) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g := r.byView[v]; g != nil {
		return int(g.agents.Load())
	}
	return 0
}
