package observe

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// wire is name in lowercase wire form, as the handler records it.
func wire(t testing.TB, name string) []byte {
	t.Helper()
	b := make([]byte, 256)
	n, err := dns.PackDomainName(strings.ToLower(name), b, 0, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	return b[:n]
}

func TestFailingNames(t *testing.T) {
	type rec struct {
		name  string
		rcode int
		times int
	}
	for _, tc := range []struct {
		name      string
		topN      int
		recs      []rec
		want      []FailingName
		wantTotal uint64
	}{
		{
			name: "counts per name and rcode, most first",
			topN: 3,
			recs: []rec{
				{name: "a.example.", rcode: dns.RcodeNameError, times: 5},
				{name: "b.example.", rcode: dns.RcodeServerFailure, times: 7},
				{name: "a.example.", rcode: dns.RcodeServerFailure, times: 1},
				{name: "c.example.", rcode: dns.RcodeRefused, times: 2},
			},
			want: []FailingName{
				{Name: "b.example.", Rcode: dns.RcodeServerFailure, Count: 7},
				{Name: "a.example.", Rcode: dns.RcodeNameError, Count: 5},
				{Name: "c.example.", Rcode: dns.RcodeRefused, Count: 2},
			},
			wantTotal: 15,
		},
		{
			name: "other rcodes are not failures",
			topN: 3,
			recs: []rec{
				{name: "ok.example.", rcode: dns.RcodeSuccess, times: 3},
				{name: "bad.example.", rcode: dns.RcodeFormatError, times: 3},
				{name: "x.example.", rcode: dns.RcodeNotImplemented, times: 3},
			},
			want: []FailingName{},
		},
		{
			name: "zero top-n takes the default, more is cut to the maximum",
			topN: 0,
			recs: []rec{{name: "a.", rcode: dns.RcodeNameError, times: 1}},
			want: []FailingName{{Name: "a.", Rcode: dns.RcodeNameError, Count: 1}}, wantTotal: 1,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := NewFailingNames(tc.topN)
			for _, r := range tc.recs {
				for range r.times {
					f.record(wire(t, r.name), r.rcode)
				}
			}
			got, total := f.Take()
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Take (-want +got):\n%s", diff)
			}
			if total != tc.wantTotal {
				t.Errorf("total %d, want %d", total, tc.wantTotal)
			}
		})
	}
	if n := NewFailingNames(0).TopN(); n != DefaultFailingTopN {
		t.Errorf("TopN(0) = %d, want %d", n, DefaultFailingTopN)
	}
	if n := NewFailingNames(1000).TopN(); n != MaxFailingTopN {
		t.Errorf("TopN(1000) = %d, want %d", n, MaxFailingTopN)
	}
}

// TestFailingNamesBounded: however many distinct names fail, the summary
// holds topN*failingSlotsPerName slots, the heavy hitters survive a flood
// of names asked once, and no count is overstated.
func TestFailingNamesBounded(t *testing.T) {
	const topN = 3
	f := NewFailingNames(topN)
	slots := cap(f.slots)
	if slots != topN*failingSlotsPerName {
		t.Fatalf("%d slots, want %d", slots, topN*failingSlotsPerName)
	}
	heavy := []string{"heavy-1.example.", "heavy-2.example.", "heavy-3.example."}
	// 10,000 distinct names once each, and the heavy names 2,000 times
	// each (20% of the failures each, far above 1/slots), interleaved.
	var total uint64
	for i := range 10000 {
		f.record(wire(t, fmt.Sprintf("random-%d.example.", i)), dns.RcodeNameError)
		total++
		if i%5 == 0 {
			for _, h := range heavy {
				f.record(wire(t, h), dns.RcodeNameError)
				total++
			}
		}
		if len(f.slots) > slots || cap(f.slots) != slots {
			t.Fatalf("after %d names: %d slots of %d", i, len(f.slots), cap(f.slots))
		}
	}
	got, gotTotal := f.Take()
	if gotTotal != total {
		t.Errorf("total %d, want %d", gotTotal, total)
	}
	if len(got) != topN {
		t.Fatalf("got %d names, want %d: %v", len(got), topN, got)
	}
	for i, g := range got {
		if g.Name != heavy[0] && g.Name != heavy[1] && g.Name != heavy[2] {
			t.Errorf("name %d is %q, want a heavy name", i, g.Name)
		}
		// Each heavy name failed 2,000 times: a lower bound never says
		// more, and Space-Saving loses at most total/slots of it.
		if g.Count > 2000 || g.Count < 2000-total/uint64(slots) {
			t.Errorf("%s counted %d, want in [%d, 2000]", g.Name, g.Count, 2000-total/uint64(slots))
		}
	}
}

// TestFailingNamesWindow: Take starts a new window.
func TestFailingNamesWindow(t *testing.T) {
	f := NewFailingNames(2)
	f.record(wire(t, "a."), dns.RcodeNameError)
	if got, _ := f.Take(); len(got) != 1 {
		t.Fatalf("first window %v, want a.", got)
	}
	if got, total := f.Take(); len(got) != 0 || total != 0 {
		t.Errorf("second window %v (total %d), want empty", got, total)
	}
	f.record(wire(t, "b."), dns.RcodeServerFailure)
	want := []FailingName{{Name: "b.", Rcode: dns.RcodeServerFailure, Count: 1}}
	if got, _ := f.Take(); !cmp.Equal(want, got) {
		t.Errorf("third window %v, want %v", got, want)
	}
}

// TestFailingNamesLongest: the longest wire name (255 bytes) fits a slot
// as it is.
func TestFailingNamesLongest(t *testing.T) {
	label := strings.Repeat("a", 63)
	name := strings.Join([]string{label, label, label, strings.Repeat("b", 61)}, ".") + "."
	w := wire(t, name)
	if len(w) != 255 {
		t.Fatalf("wire length %d, want 255", len(w))
	}
	f := NewFailingNames(1)
	f.record(w, dns.RcodeNameError)
	if got, _ := f.Take(); len(got) != 1 || got[0].Name != name {
		t.Errorf("got %v, want %s", got, name)
	}
}

// TestFailingNamesConcurrent: concurrent records lose no count (run with
// -race).
func TestFailingNamesConcurrent(t *testing.T) {
	f := NewFailingNames(2)
	w := wire(t, "x.example.")
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 1000 {
				f.record(w, dns.RcodeNameError)
			}
		})
	}
	wg.Wait()
	if got, _ := f.Take(); len(got) != 1 || got[0].Count != 4000 {
		t.Errorf("got %v, want x.example. 4000", got)
	}
}

// TestFailingNamesMemory states the summary's fixed size: its slots and
// their names are all it holds.
func TestFailingNamesMemory(t *testing.T) {
	slot := int(unsafe.Sizeof(failSlot{}))
	if slot > 32 {
		t.Errorf("slot of %d bytes, want <= 32", slot)
	}
	size := func(topN int) int {
		f := NewFailingNames(topN)
		return cap(f.slots)*slot + len(f.names)
	}
	if got := size(DefaultFailingTopN); got > 12<<10 {
		t.Errorf("default summary %d bytes, want <= 12 KiB", got)
	}
	t.Logf("default summary (%d names) %d bytes; largest (%d names) %d bytes",
		DefaultFailingTopN, size(DefaultFailingTopN), MaxFailingTopN, size(MaxFailingTopN))
}

// BenchmarkFailingRecordFlood is the worst case: every failing answer a
// new name, so each record scans every slot and evicts.
func BenchmarkFailingRecordFlood(b *testing.B) {
	for _, topN := range []int{DefaultFailingTopN, MaxFailingTopN} {
		b.Run(fmt.Sprintf("topN=%d", topN), func(b *testing.B) {
			f := NewFailingNames(topN)
			names := make([][]byte, 1024)
			for i := range names {
				names[i] = wire(b, fmt.Sprintf("random-%d.example.com.", i))
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				f.record(names[i%len(names)], dns.RcodeNameError)
				i++
			}
		})
	}
}
