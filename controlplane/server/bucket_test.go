package server

import (
	"testing"
	"time"
)

// TestBuckets: a key's bucket starts full at burst times its scale,
// refills at rate times its scale up to that, and never goes below empty.
func TestBuckets(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	for _, tc := range []struct {
		name       string
		scale      int
		takes      int
		after      time.Duration
		wantTokens float64
	}{
		{name: "new key is full", scale: 1, wantTokens: 4},
		{name: "scale multiplies burst", scale: 3, wantTokens: 12},
		{name: "zero scale counts as one", scale: 0, wantTokens: 4},
		{name: "takes spend", scale: 1, takes: 3, wantTokens: 1},
		{name: "empty stays empty", scale: 1, takes: 6, wantTokens: 0},
		{name: "refills at rate", scale: 1, takes: 4, after: time.Second, wantTokens: 2},
		{name: "refills at rate times scale", scale: 2, takes: 8, after: time.Second, wantTokens: 4},
		{name: "refills up to burst", scale: 1, takes: 4, after: time.Hour, wantTokens: 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBuckets[string](4, 2, 10)
			st := b.get("k", tc.scale, t0)
			for range tc.takes {
				b.take(st, t0)
			}
			if got := b.get("k", 99, t0.Add(tc.after)).tokens; got != tc.wantTokens {
				t.Errorf("tokens = %v, want %v", got, tc.wantTokens)
			}
		})
	}
}

// TestBucketsLookup: lookup never creates a key, and refills the one it
// finds.
func TestBucketsLookup(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	b := newBuckets[string](1, 1, 10)
	if st := b.lookup("k", t0); st != nil || len(b.m) != 0 {
		t.Fatalf("lookup of an unknown key = %+v, %d keys; want nil, 0", st, len(b.m))
	}
	b.take(b.get("k", 1, t0), t0)
	if got := b.lookup("k", t0.Add(500*time.Millisecond)).tokens; got != 0.5 {
		t.Errorf("tokens after half a second = %v, want 0.5", got)
	}
}

// TestBucketsPrune: at the limit, a new key first makes room by
// forgetting keys that hold nothing with a full bucket; keys that have
// spent tokens are kept until that is not enough (a flood), and keys
// holding something are never forgotten.
func TestBucketsPrune(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	b := newBuckets[string](2, 1, 3)
	b.get("held", 1, t0).held = 1
	b.take(b.get("spent", 1, t0), t0)
	b.get("idle", 1, t0)

	b.take(b.get("new1", 1, t0), t0)
	if !has(b, "held", "spent", "new1") || has(b, "idle") {
		t.Fatalf("after a key beyond the limit: keys %v, want held, spent, new1", keys(b))
	}
	b.get("new2", 1, t0)
	if !has(b, "held", "new2") || len(b.m) != 2 {
		t.Fatalf("after a flood of keys: keys %v, want held, new2", keys(b))
	}
}

func has(b buckets[string], ks ...string) bool {
	for _, k := range ks {
		if b.m[k] == nil {
			return false
		}
	}
	return true
}

func keys(b buckets[string]) []string {
	var ks []string
	for k := range b.m {
		ks = append(ks, k)
	}
	return ks
}
