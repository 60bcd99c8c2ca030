package main

import "time"

// histMax is the longest duration a histogram tells apart; longer ones
// count in the last bucket, and max keeps their value.
const histMax = 120 * time.Second

// hist is a histogram of durations in 1ms buckets: a run counts one
// sample per agent per change (millions), too many to keep each.
type hist struct {
	buckets []uint64
	n       uint64
	max     time.Duration
}

func newHist() *hist { return &hist{buckets: make([]uint64, histMax/time.Millisecond+1)} }

func (h *hist) add(d time.Duration) {
	d = max(d, 0)
	i := min(int(d/time.Millisecond), len(h.buckets)-1)
	h.buckets[i]++
	h.n++
	h.max = max(h.max, d)
}

// merge adds o's samples to h.
func (h *hist) merge(o *hist) {
	for i, c := range o.buckets {
		h.buckets[i] += c
	}
	h.n += o.n
	h.max = max(h.max, o.max)
}

func (h *hist) reset() {
	clear(h.buckets)
	h.n, h.max = 0, 0
}

// quantile is the upper edge of the bucket holding the q-quantile (to
// the millisecond), 0 for no samples; max for the last sample.
func (h *hist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q * float64(h.n))
	if rank >= h.n {
		return h.max
	}
	var seen uint64
	for i, c := range h.buckets {
		seen += c
		if seen > rank {
			return min(time.Duration(i+1)*time.Millisecond, h.max)
		}
	}
	return h.max
}
