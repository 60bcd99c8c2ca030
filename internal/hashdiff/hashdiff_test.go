package hashdiff

import (
	"fmt"
	"testing"
)

func TestDiff(t *testing.T) {
	b := New(0)
	for i := range 100 {
		b.Add(fmt.Appendf(nil, "svc-%d", i), fmt.Appendf(nil, "10.0.0.%d", i))
	}
	b.Seal()
	if b.Len() != 100 || b.Left() != 100 {
		t.Fatalf("Len %d Left %d, want 100 100", b.Len(), b.Left())
	}
	// The new version: svc-0..89 unchanged, svc-90..94 changed, svc-95..99
	// removed, svc-100 added.
	for i := range 95 {
		content := fmt.Appendf(nil, "10.0.0.%d", i)
		if i >= 90 {
			content = []byte("10.9.9.9")
		}
		if got, want := b.Match(fmt.Appendf(nil, "svc-%d", i), content), i < 90; got != want {
			t.Errorf("Match(svc-%d) = %v, want %v", i, got, want)
		}
	}
	if b.Match([]byte("svc-100"), []byte("10.0.1.0")) {
		t.Error("Match of a new name = true")
	}
	if b.Match([]byte("svc-0"), []byte("10.0.0.0")) {
		t.Error("a second Match of one name = true")
	}
	if b.Left() != 10 {
		t.Errorf("Left = %d, want 10", b.Left())
	}
	for i := range 100 {
		if got, want := b.Changed(fmt.Appendf(nil, "svc-%d", i)), i >= 90; got != want {
			t.Errorf("Changed(svc-%d) = %v, want %v", i, got, want)
		}
	}
	if b.Changed([]byte("svc-100")) {
		t.Error("Changed of a name not in the base = true")
	}
	// Same asks again without marking: unchanged names are Same, replaced
	// and new ones not.
	for i, want := range map[int]bool{0: true, 89: true, 90: false, 100: false} {
		content := fmt.Appendf(nil, "10.0.0.%d", i)
		if i == 90 {
			content = []byte("10.9.9.9")
		}
		if got := b.Same(fmt.Appendf(nil, "svc-%d", i), content); got != want {
			t.Errorf("Same(svc-%d) = %v, want %v", i, got, want)
		}
		if got := b.SameString(fmt.Sprintf("svc-%d", i), content); got != want {
			t.Errorf("SameString(svc-%d) = %v, want %v", i, got, want)
		}
	}
	if b.Left() != 10 {
		t.Errorf("Left = %d after Same, want 10", b.Left())
	}
}

// A name hashes the same as bytes and as a string, so callers may mix them.
func TestStringForms(t *testing.T) {
	b := New(0)
	b.AddString("a", []byte("1"))
	b.Add([]byte("b"), []byte("2"))
	b.Seal()
	if !b.Match([]byte("a"), []byte("1")) || !b.MatchString("b", []byte("2")) {
		t.Error("a name added in one form did not match in the other")
	}
	b2 := New(0)
	b2.AddString("a", []byte("1"))
	b2.Seal()
	if !b2.ChangedString("a") || !b2.Changed([]byte("a")) {
		t.Error("an unmatched name is not Changed in both forms")
	}
}

func TestEmpty(t *testing.T) {
	b := New(4)
	b.Seal()
	if b.Match([]byte("a"), nil) || b.Changed([]byte("a")) || b.Left() != 0 {
		t.Error("an empty base matched or changed something")
	}
}

func BenchmarkBase(b *testing.B) {
	const n = 100000
	names := make([][]byte, n)
	for i := range names {
		names[i] = fmt.Appendf(nil, "svc-%d.ns-%d.svc.cluster.local", i, i%100)
	}
	content := []byte("\n\x0a10.96.0.1")
	b.ReportAllocs()
	for b.Loop() {
		base := New(0)
		for _, nm := range names {
			base.Add(nm, content)
		}
		base.Seal()
		for _, nm := range names {
			base.Match(nm, content)
		}
	}
	b.ReportMetric(float64(n*16+n)/n, "held-B/name")
}
