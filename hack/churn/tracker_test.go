package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// TestTracker: the figures the verdict rests on, from scripted events.
func TestTracker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	w := newWriteLog()
	tr := newTracker(w)
	// Agents 0 and 1 have the table of change 0 (version v0) before the
	// churn; agent 2 starts during it.
	tr.started(0, at(-100))
	tr.started(1, at(-100))
	tr.observe(event{agent: 0, full: true, seq: -1, at: at(-50), version: "v0"})
	tr.observe(event{agent: 1, full: true, seq: -1, at: at(-50), version: "v0"})
	tr.churnStart = at(0)
	w.add(1, at(100))
	w.add(2, at(200))
	// Agent 0's next delta (v0 -> v2) carries both changes. v0's change
	// is not known yet: the first delta from v0 tells nothing of it.
	tr.verSeq["v0"] = 0
	tr.observe(event{agent: 0, seq: 2, at: at(700), version: "v2"})
	// Agent 2 starts at 300 and gets a full table of v2 at 450 (its
	// change known from agent 0's delta).
	tr.started(2, at(300))
	tr.observe(event{agent: 2, full: true, seq: -1, at: at(450), version: "v2"})
	w.add(3, at(800))
	tr.observe(event{agent: 2, seq: 3, at: at(900), version: "v3"})
	// An event of a stopped agent, read after its stop, counts nothing.
	tr.stopped(5)
	tr.observe(event{agent: 5, full: true, seq: -1, at: at(900), version: "v3"})
	tr.endChurn(at(1000))
	tr.closeGaps()

	ack, join, responses, jumped := tr.interval()
	// Agent 0: change 1 after 600ms, 2 after 500ms; agent 2: 3 after 100ms.
	if got, want := []any{ack.n, ack.max, ack.quantile(0.5), responses, jumped}, []any{uint64(3), 600 * time.Millisecond, 501 * time.Millisecond, 2, 3}; !cmp.Equal(want, got) {
		t.Errorf("ack figures (-want +got):\n%s", cmp.Diff(want, got))
	}
	if join.n != 1 || join.max != 150*time.Millisecond {
		t.Errorf("join: %d samples, max %v; want 1, 150ms", join.n, join.max)
	}
	// Agent 1 never heard of changes 1-3; the others are on 3 (agent 0
	// is not: it holds 2).
	if diff := cmp.Diff([]int{0, 1}, tr.behind(3)); diff != "" {
		t.Errorf("behind (-want +got):\n%s", diff)
	}
	// Gaps: agent 1 waited the whole churn (1000ms), agent 0 700ms then
	// 300ms, agent 2 450ms from its first table to the churn's end.
	_, _, worst, agent := tr.gaps()
	if worst != time.Second || agent != 1 {
		t.Errorf("worst gap %v of agent %d, want 1s of agent 1", worst, agent)
	}
	if n, tabled := tr.live(); n != 3 || tabled != 3 {
		t.Errorf("live %d, tabled %d; want 3, 3", n, tabled)
	}
}

// TestStarveBound: a loaded replica delays every agent alike and is not
// starving one; the bound follows the median agent.
func TestStarveBound(t *testing.T) {
	for _, tc := range []struct {
		name           string
		starve, median time.Duration
		want           time.Duration
	}{
		{name: "idle replica", starve: 10 * time.Second, median: time.Second, want: 10 * time.Second},
		{name: "loaded replica", starve: 10 * time.Second, median: 5 * time.Second, want: 15 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := starveBound(tc.starve, tc.median); got != tc.want {
				t.Errorf("starveBound(%v, %v) = %v, want %v", tc.starve, tc.median, got, tc.want)
			}
		})
	}
}

// TestMarker: a change's number survives the marker's address, and
// other addresses are not taken for one.
func TestMarker(t *testing.T) {
	for _, seq := range []int{0, 1, 255, 256, 70000, 1<<24 - 1} {
		if got := addrSeq(seqAddr(seq).String()); got != seq {
			t.Errorf("seq %d came back as %d", seq, got)
		}
	}
	for _, s := range []string{"", "10.0.0.1", "fd00::1", "x"} {
		if got := addrSeq(s); got != -1 {
			t.Errorf("addrSeq(%q) = %d, want -1", s, got)
		}
	}
}
