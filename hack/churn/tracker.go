package main

import (
	"sort"
	"sync"
	"time"
)

// writeLog is when each change was written: the time of change k is at
// index k (k from 1). The churn goroutine appends, the tracker reads.
type writeLog struct {
	mu    sync.Mutex
	times []time.Time
}

func newWriteLog() *writeLog { return &writeLog{times: make([]time.Time, 1)} }

func (w *writeLog) add(seq int, at time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(w.times) <= seq {
		w.times = append(w.times, at)
	}
}

func (w *writeLog) last() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.times) - 1
}

// agentState is what the tracker knows of one agent.
type agentState struct {
	started time.Time // the start command
	first   time.Time // its first table; zero before
	last    time.Time // its last update
	seq     int       // the last change its version holds; -1 unknown
	version string    // the version it holds
	maxGap  time.Duration
	gone    bool
}

// tracker turns the agents' events into the run's figures. One goroutine
// (the driver's loop) calls it.
type tracker struct {
	writes *writeLog
	// verSeq maps a version to the last change it holds, learnt from the
	// deltas that carry the marker: every agent of the view names the
	// same content by the same version.
	verSeq map[string]int
	agents map[int]*agentState
	// churnStart and churnEnd bound the time changes flow; a gap counts
	// from churnStart at the earliest. churnEnd is zero while they flow.
	churnStart, churnEnd time.Time

	ack, ackTotal     *hist // change written -> agent's ACK (interval, run)
	join, joinTotal   *hist // start -> first table, agents started while changes flow
	responses, jumped int   // deltas with a known change span, and the changes they carried (interval)
	unresolved        int   // updates whose change span could not be told (run)
}

func newTracker(w *writeLog) *tracker {
	return &tracker{writes: w, verSeq: map[string]int{}, agents: map[int]*agentState{},
		ack: newHist(), ackTotal: newHist(), join: newHist(), joinTotal: newHist()}
}

// started notes agent i's start command. Its first event may have been
// read before (the driver reads events and starts on two channels).
func (t *tracker) started(i int, at time.Time) {
	a, ok := t.agents[i]
	if !ok {
		t.agents[i] = &agentState{started: at, seq: -1}
		return
	}
	a.started = at
	if !a.first.IsZero() && t.churning(at) {
		t.join.add(a.first.Sub(at))
	}
}

// churning reports whether changes flowed at a time.
func (t *tracker) churning(at time.Time) bool {
	return !t.churnStart.IsZero() && at.After(t.churnStart)
}

func (t *tracker) stopped(i int) {
	a, ok := t.agents[i]
	if !ok {
		a = &agentState{seq: -1}
		t.agents[i] = a
	}
	a.gone = true
}

// seqOf is the change a version holds, -1 when not known (yet).
func (t *tracker) seqOf(version string) int {
	if s, ok := t.verSeq[version]; ok {
		return s
	}
	return -1
}

// observe takes one event.
func (t *tracker) observe(e event) {
	if e.seq >= 0 && e.version != "-" {
		t.verSeq[e.version] = e.seq
	}
	a, ok := t.agents[e.agent]
	if !ok {
		a = &agentState{seq: -1}
		t.agents[e.agent] = a
	}
	if a.gone {
		return
	}
	seq := e.seq
	if seq < 0 && t.churnStart.IsZero() {
		// Before the churn every version holds change 0: there is no
		// other, and no delta ever carries its marker.
		seq = 0
		t.verSeq[e.version] = 0
	}
	if seq < 0 {
		seq = t.seqOf(e.version)
	}
	if a.first.IsZero() {
		a.first = e.at
		if !a.started.IsZero() && t.churning(a.started) {
			t.join.add(e.at.Sub(a.started))
		}
	} else {
		t.gap(a, e.at)
		prev := a.seq
		if prev < 0 {
			prev = t.seqOf(a.version)
		}
		switch {
		case prev < 0 || seq < 0:
			t.unresolved++
		case seq > prev:
			t.latencies(prev, seq, e.at)
		}
	}
	a.last, a.seq, a.version = e.at, seq, e.version
}

// gap notes the time since the agent's last update (or since the changes
// began to flow) while they flow or it has not caught up with them.
func (t *tracker) gap(a *agentState, at time.Time) {
	if t.churnStart.IsZero() {
		return
	}
	from := a.last
	if from.Before(t.churnStart) {
		from = t.churnStart
	}
	a.maxGap = max(a.maxGap, at.Sub(from))
}

// latencies counts, for each change prev+1..seq, its time from written
// to this agent's ACK.
func (t *tracker) latencies(prev, seq int, at time.Time) {
	t.writes.mu.Lock()
	defer t.writes.mu.Unlock()
	for k := prev + 1; k <= seq && k < len(t.writes.times); k++ {
		t.ack.add(at.Sub(t.writes.times[k]))
	}
	t.responses++
	t.jumped += seq - prev
}

// interval closes the figures of one interval into the run's.
func (t *tracker) interval() (ack, join *hist, responses, jumped int) {
	ack, join = newHist(), newHist()
	ack.merge(t.ack)
	join.merge(t.join)
	t.ackTotal.merge(t.ack)
	t.joinTotal.merge(t.join)
	t.ack.reset()
	t.join.reset()
	responses, jumped = t.responses, t.jumped
	t.responses, t.jumped = 0, 0
	return ack, join, responses, jumped
}

// live counts the agents not stopped, and those of them with a table.
func (t *tracker) live() (n, tabled int) {
	for _, a := range t.agents {
		if !a.gone {
			n++
			if !a.first.IsZero() {
				tabled++
			}
		}
	}
	return n, tabled
}

// behind lists the live agents not on change last, in index order.
func (t *tracker) behind(last int) []int {
	var out []int
	for i, a := range t.agents {
		if a.gone {
			continue
		}
		s := a.seq
		if s < 0 {
			s = t.seqOf(a.version)
		}
		if s != last {
			out = append(out, i)
		}
	}
	sort.Ints(out)
	return out
}

// unknownBehind counts the running agents whose version's change is not
// known.
func (t *tracker) unknownBehind() (n int) {
	for _, a := range t.agents {
		if !a.gone && a.seq < 0 && t.seqOf(a.version) < 0 {
			n++
		}
	}
	return n
}

// endChurn notes when the changes stopped.
func (t *tracker) endChurn(at time.Time) { t.churnEnd = at }

// closeGaps measures, once the events of the churn are read, the gap of
// every running agent that heard nothing after the churn's end: from its
// last update to that end. Closing them at the end itself would count the
// events the tool had not read yet as gaps.
func (t *tracker) closeGaps() {
	for _, a := range t.agents {
		if !a.gone && !a.first.IsZero() && a.last.Before(t.churnEnd) {
			t.gap(a, t.churnEnd)
		}
	}
}

// gaps is the distribution of the live agents' longest gaps.
func (t *tracker) gaps() (p50, p99, worst time.Duration, agent int) {
	var all []time.Duration
	agent = -1
	for i, a := range t.agents {
		if a.gone || a.first.IsZero() {
			continue
		}
		all = append(all, a.maxGap)
		if a.maxGap > worst {
			worst, agent = a.maxGap, i
		}
	}
	if len(all) == 0 {
		return 0, 0, 0, -1
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	return all[len(all)/2], all[min(len(all)-1, len(all)*99/100)], worst, agent
}
