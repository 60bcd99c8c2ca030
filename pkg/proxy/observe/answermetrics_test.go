package observe

import "testing"

func TestDurBucket(t *testing.T) {
	tests := []struct {
		name string
		ns   uint64
		want int
	}{
		{name: "zero", ns: 0, want: 0},
		{name: "below first bound", ns: 100, want: 0},
		{name: "on first bound", ns: 256, want: 0},
		{name: "past first bound", ns: 257, want: 1},
		{name: "on second bound", ns: 1024, want: 1},
		{name: "past second bound", ns: 1025, want: 2},
		{name: "on last bound", ns: 1 << 32, want: nDurBuckets - 1},
		{name: "past last bound", ns: 1<<32 + 1, want: nDurBuckets},
		{name: "huge", ns: 1 << 62, want: nDurBuckets},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := answerDurationBuckets.Bucket(tc.ns)
			if got != tc.want {
				t.Fatalf("answerDurationBuckets.Bucket(%d) = %d, want %d", tc.ns, got, tc.want)
			}
			// The bucket agrees with the bounds the registry is given.
			if got < nDurBuckets && float64(tc.ns)*1e-9 > answerDurationBuckets.Bounds()[got]*(1+1e-12) {
				t.Errorf("%dns above its bucket's bound %v", tc.ns, answerDurationBuckets.Bounds()[got])
			}
			if got > 0 && float64(tc.ns)*1e-9 <= answerDurationBuckets.Bounds()[got-1] {
				t.Errorf("%dns fits the bucket below, bound %v", tc.ns, answerDurationBuckets.Bounds()[got-1])
			}
		})
	}
}

func TestSizeBucket(t *testing.T) {
	tests := []struct {
		name string
		n    uint64
		want int
	}{
		{name: "header only", n: 12, want: 0},
		{name: "on first bound", n: 64, want: 0},
		{name: "past first bound", n: 65, want: 1},
		{name: "512", n: 512, want: 3},
		{name: "on last bound", n: 65536, want: nSizeBuckets - 1},
		{name: "past last bound", n: 65537, want: nSizeBuckets},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := responseSizeBuckets.Bucket(tc.n); got != tc.want {
				t.Fatalf("responseSizeBuckets.Bucket(%d) = %d, want %d", tc.n, got, tc.want)
			}
			if got := responseSizeBuckets.Bucket(tc.n); got < nSizeBuckets && float64(tc.n) > responseSizeBuckets.Bounds()[got] {
				t.Errorf("%d above its bucket's bound %v", tc.n, responseSizeBuckets.Bounds()[got])
			}
		})
	}
}
