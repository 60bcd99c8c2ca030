package server

import "testing"

func TestQuarantineThreshold(t *testing.T) {
	q := newQuarantine(3, 0.01)
	for _, tc := range []struct {
		name   string
		agents int
		want   int
	}{
		{name: "no agent", agents: 0, want: 3},
		{name: "small view: the minimum", agents: 300, want: 3},
		{name: "just over 1% of 300", agents: 301, want: 4},
		{name: "large view: 1%", agents: 10_000, want: 100},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := q.threshold(tc.agents); got != tc.want {
				t.Errorf("threshold(%d) = %d, want %d", tc.agents, got, tc.want)
			}
		})
	}
}
