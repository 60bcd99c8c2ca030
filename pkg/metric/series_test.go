package metric

import (
	"math"
	"slices"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// collect returns the series f's Collect emits, copied out of the call.
func collect(f func(emit func(Series))) []Series {
	var out []Series
	f(func(s Series) {
		s.LabelValues = slices.Clone(s.LabelValues)
		s.Counts = slices.Clone(s.Counts)
		out = append(out, s)
	})
	return out
}

func TestCounterAndGauge(t *testing.T) {
	var c Counter
	c.Inc()
	c.Add(41)
	var g Gauge
	g.Inc()
	g.Inc()
	g.Dec()
	g.Add(-5)
	if c.Load() != 42 || g.Load() != -4 {
		t.Errorf("counter %d, gauge %d, want 42 and -4", c.Load(), g.Load())
	}
	if diff := cmp.Diff([]Series{{Value: 42}}, collect(c.Collect)); diff != "" {
		t.Errorf("counter series (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Series{{Value: -4}}, collect(g.Collect)); diff != "" {
		t.Errorf("gauge series (-want +got):\n%s", diff)
	}
}

// An observation goes to the first bucket whose bound is at least it, as
// Prometheus's le does; the counts come out cumulative, +Inf last.
func TestHistogram(t *testing.T) {
	h := NewHistogram([]float64{0.5, 1, 2})
	for _, v := range []float64{0, 0.5, 0.75, 1, 2, 2.5, 100} {
		h.Observe(v)
	}
	want := Series{LabelValues: []string{"udp"}, Counts: []uint64{2, 4, 5, 7}, Sum: 106.75}
	if diff := cmp.Diff(want, h.Series("udp")); diff != "" {
		t.Errorf("series (-want +got):\n%s", diff)
	}
}

func TestBadBucketsPanic(t *testing.T) {
	for _, tc := range []struct {
		name string
		make func()
	}{
		{name: "no bounds", make: func() { NewHistogram(nil) }},
		{name: "descending", make: func() { NewHistogram([]float64{2, 1}) }},
		{name: "twice", make: func() { NewHistogram([]float64{1, 1}) }},
		{name: "infinite", make: func() { NewHistogramVec([]string{"a"}, []float64{1, math.Inf(1)}) }},
		{name: "pow2 past 2^63", make: func() { NewPow2Buckets(60, 2, 3, 1) }},
		{name: "pow2 step 0", make: func() { NewPow2Buckets(0, 0, 3, 1) }},
		{name: "pow2 no unit", make: func() { NewPow2Buckets(0, 1, 3, 0) }},
		{name: "exponential factor 1", make: func() { ExponentialBuckets(1, 1, 3) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			tc.make()
		})
	}
}

func TestExponentialBuckets(t *testing.T) {
	if diff := cmp.Diff([]float64{0.25, 0.5, 1, 2}, ExponentialBuckets(0.25, 2, 4)); diff != "" {
		t.Errorf("bounds (-want +got):\n%s", diff)
	}
}

// Every value finds the smallest bound at least itself, for layouts with
// steps of one and two powers (those of the proxy's answer histograms),
// checked at and around every power of two.
func TestPow2Bucket(t *testing.T) {
	for _, tc := range []struct {
		name                string
		shift, step, n      int
		unit                float64
		wantFirst, wantLast float64
	}{
		{name: "nanoseconds by four", shift: 8, step: 2, n: 13, unit: 1e-9, wantFirst: 256e-9, wantLast: 4.294967296},
		{name: "bytes by two", shift: 6, step: 1, n: 11, unit: 1, wantFirst: 64, wantLast: 65536},
		{name: "from one by eight", shift: 0, step: 3, n: 4, unit: 1, wantFirst: 1, wantLast: 512},
		{name: "up to 2^63", shift: 61, step: 1, n: 3, unit: 1, wantFirst: 1 << 61, wantLast: 1 << 63},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := NewPow2Buckets(tc.shift, tc.step, tc.n, tc.unit)
			bounds := b.Bounds()
			if len(bounds) != tc.n || bounds[0] != tc.wantFirst || bounds[tc.n-1] != tc.wantLast {
				t.Fatalf("bounds %v, want %d from %v to %v", bounds, tc.n, tc.wantFirst, tc.wantLast)
			}
			values := []uint64{0, math.MaxUint64}
			for k := range 64 {
				p := uint64(1) << k
				values = append(values, p-1, p, p+1)
			}
			for _, v := range values {
				// The smallest bound at least v, in whole units.
				want := tc.n
				for i := range tc.n {
					if v <= uint64(1)<<(tc.shift+i*tc.step) {
						want = i
						break
					}
				}
				if got := b.Bucket(v); got != want {
					t.Errorf("Bucket(%d) = %d, want %d", v, got, want)
				}
			}
		})
	}
}

// A weighted observation counts weight times in its bucket and its sum,
// written in the unit.
func TestPow2Histogram(t *testing.T) {
	b := NewPow2Buckets(8, 2, 3, 1e-9) // 256ns, 1024ns, 4096ns
	h := NewPow2Histogram(b)
	h.Observe(100, 16)
	h.Observe(1000, 1)
	h.Observe(1<<20, 2)
	want := Series{LabelValues: []string{"tcp", "table"}, Counts: []uint64{16, 17, 17, 19}, Sum: float64(100*16+1000+2<<20) * 1e-9}
	if diff := cmp.Diff(want, h.Series("tcp", "table")); diff != "" {
		t.Errorf("series (-want +got):\n%s", diff)
	}
}

// A labelled family keeps one series per label values, hands the same one
// back, and emits each created one, in the order of creation, counted or
// not.
func TestVec(t *testing.T) {
	c := NewCounterVec([]string{"upstream", "kind"})
	a := c.With("10.0.0.1:53", "timeout")
	c.With("10.0.0.2:53", "timeout")
	if c.With("10.0.0.1:53", "timeout") != a {
		t.Error("With the same values made a second series")
	}
	a.Add(3)
	want := []Series{{LabelValues: []string{"10.0.0.1:53", "timeout"}, Value: 3}, {LabelValues: []string{"10.0.0.2:53", "timeout"}}}
	if diff := cmp.Diff(want, collect(c.Collect)); diff != "" {
		t.Errorf("counter series (-want +got):\n%s", diff)
	}
	h := NewHistogramVec([]string{"upstream"}, []float64{1})
	h.With("10.0.0.1:53").Observe(0.5)
	wantH := []Series{{LabelValues: []string{"10.0.0.1:53"}, Counts: []uint64{1, 1}, Sum: 0.5}}
	if diff := cmp.Diff(wantH, collect(h.Collect)); diff != "" {
		t.Errorf("histogram series (-want +got):\n%s", diff)
	}
	defer func() {
		if recover() == nil {
			t.Error("With of one value for two labels: no panic")
		}
	}()
	c.With("10.0.0.1:53")
}

// Counting is what a query pays: it allocates nothing.
func TestCountingAllocatesNothing(t *testing.T) {
	var c Counter
	var g Gauge
	h := NewHistogram(ExponentialBuckets(0.001, 2, 10))
	p := NewPow2Histogram(NewPow2Buckets(8, 2, 13, 1e-9))
	v := NewCounterVec([]string{"kind"}).With("timeout")
	if n := testing.AllocsPerRun(100, func() {
		c.Inc()
		g.Inc()
		g.Dec()
		h.Observe(0.01)
		p.Observe(5000, 16)
		v.Inc()
	}); n != 0 {
		t.Errorf("%v allocations per count, want 0", n)
	}
}

// Counting and scraping at once is safe (run with -race) and loses
// nothing.
func TestConcurrentCountAndCollect(t *testing.T) {
	const workers, each = 4, 1000
	cv := NewCounterVec([]string{"w"})
	hv := NewHistogramVec([]string{"w"}, []float64{1})
	p := NewPow2Histogram(NewPow2Buckets(0, 1, 4, 1))
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			name := string(rune('a' + w))
			for range each {
				cv.With(name).Inc()
				hv.With(name).Observe(2)
				p.Observe(3, 1)
			}
		})
	}
	wg.Go(func() {
		for range 100 {
			collect(cv.Collect)
			collect(hv.Collect)
			p.Series()
		}
	})
	wg.Wait()
	var total float64
	for _, s := range collect(cv.Collect) {
		total += s.Value
	}
	if total != workers*each {
		t.Errorf("counted %v, want %d", total, workers*each)
	}
	if got := p.Series().Counts; got[len(got)-1] != workers*each {
		t.Errorf("pow2 histogram counted %d, want %d", got[len(got)-1], workers*each)
	}
}
