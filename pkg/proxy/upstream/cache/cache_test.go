package cache

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// packReply packs a reply to name/A with the given records (zone-file text).
func packReply(t testing.TB, name string, rrs ...string) ([]byte, int) {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.Response = true
	m.Compress = true
	for _, s := range rrs {
		rr, err := dns.NewRR(s)
		if err != nil {
			t.Fatalf("rr %q: %v", s, err)
		}
		m.Answer = append(m.Answer, rr)
	}
	b, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	qlen := len(name) + 1 + 4 // dotted name of plain labels: one byte longer in wire form
	return b, qlen
}

func TestNewEntryAppendTo(t *testing.T) {
	tests := []struct {
		name string
		rrs  []string
		ttl  uint32
		want []string
	}{
		{name: "no records", ttl: 7},
		{
			name: "compressed owners and rdata names",
			rrs:  []string{"a.example. 300 IN CNAME b.example.", "b.example. 300 IN A 192.0.2.1"},
			ttl:  42,
			want: []string{"a.example.\t42\tIN\tCNAME\tb.example.", "b.example.\t42\tIN\tA\t192.0.2.1"},
		},
		{
			name: "many records",
			rrs:  []string{"a.example. 1 IN A 192.0.2.1", "a.example. 2 IN A 192.0.2.2", "a.example. 3 IN TXT \"hi\""},
			ttl:  0,
			want: []string{"a.example.\t0\tIN\tA\t192.0.2.1", "a.example.\t0\tIN\tA\t192.0.2.2", "a.example.\t0\tIN\tTXT\t\"hi\""},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			packed, qlen := packReply(t, "a.example.", tc.rrs...)
			e, err := NewEntry(packed, qlen, 60, 0, false)
			if err != nil {
				t.Fatalf("NewEntry: %v", err)
			}
			if len(e.TTLOffsets) != len(tc.rrs) {
				t.Fatalf("%d TTL offsets, want %d", len(e.TTLOffsets), len(tc.rrs))
			}
			// Echo the question in another case: the owner names follow it.
			q := append([]byte(nil), packed[12:12+qlen]...)
			out := e.AppendTo([]byte("prefix"), q, tc.ttl)
			if string(out[:6]) != "prefix" {
				t.Fatalf("dst prefix lost")
			}
			m := new(dns.Msg)
			if err := m.Unpack(out[6:]); err != nil {
				t.Fatalf("unpack: %v", err)
			}
			var got []string
			for _, rr := range m.Answer {
				got = append(got, rr.String())
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("answer (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNewEntryMalformed(t *testing.T) {
	good, qlen := packReply(t, "a.example.", "a.example. 300 IN A 192.0.2.1")
	tests := []struct {
		name   string
		packed []byte
		qlen   int
	}{
		{name: "shorter than header", packed: good[:5], qlen: qlen},
		{name: "question longer than message", packed: good, qlen: len(good)},
		{name: "record cut short", packed: good[:len(good)-2], qlen: qlen},
		{name: "trailing bytes", packed: append(append([]byte(nil), good...), 0), qlen: qlen},
		{name: "two questions", packed: func() []byte {
			b := append([]byte(nil), good...)
			binary.BigEndian.PutUint16(b[4:], 2)
			return b
		}(), qlen: qlen},
		{name: "more records than present", packed: func() []byte {
			b := append([]byte(nil), good...)
			binary.BigEndian.PutUint16(b[6:], 2)
			return b
		}(), qlen: qlen},
		{name: "reserved label type", packed: func() []byte {
			b := append([]byte(nil), good...)
			b[12+qlen] = 0x80
			return b
		}(), qlen: qlen},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := NewEntry(tc.packed, tc.qlen, 60, 0, false); err == nil {
				t.Error("NewEntry accepted a malformed message")
			}
		})
	}
}

func TestGetStates(t *testing.T) {
	const sec = int64(time.Second)
	c := New(10, time.Minute)
	key := []byte("\x01a\x00\x00\x01\x00\x01")
	c.Set(string(key), &Entry{TTL: 10, Stored: 100 * sec})
	tests := []struct {
		name    string
		now     int64
		wantTTL uint32
		want    State
	}{
		{name: "just stored", now: 100 * sec, wantTTL: 10, want: Fresh},
		{name: "clock stepped back", now: 90 * sec, wantTTL: 10, want: Fresh},
		{name: "partly aged", now: 103*sec + sec/2, wantTTL: 7, want: Fresh},
		{name: "last second", now: 109*sec + sec - 1, wantTTL: 1, want: Fresh},
		{name: "expired", now: 110 * sec, want: Stale},
		{name: "end of stale window", now: 170 * sec, want: Stale},
		{name: "past stale window", now: 170*sec + 1, want: Miss},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, ttl, st := c.Get(key, tc.now)
			if st != tc.want || ttl != tc.wantTTL {
				t.Errorf("Get = ttl %d state %d, want ttl %d state %d", ttl, st, tc.wantTTL, tc.want)
			}
		})
	}
	if _, _, st := c.Get([]byte("\x01b\x00\x00\x01\x00\x01"), 100*sec); st != Miss {
		t.Errorf("unknown key: state %d, want Miss", st)
	}
}

func TestSetBoundAndEviction(t *testing.T) {
	// Shards fill unevenly, so a sharded cache may hold a little less than
	// size once full; never more, and every set is either held or evicted.
	tests := []struct {
		name    string
		size    int
		sets    int
		wantMin int
	}{
		{name: "one shard", size: 3, sets: 10, wantMin: 3},
		{name: "sharded", size: 10000, sets: 12000, wantMin: 9700},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := New(tc.size, 0)
			for i := range tc.sets {
				c.Set(fmt.Sprintf("k%d", i), &Entry{TTL: uint32(i)})
			}
			// Re-setting a present key replaces without evicting.
			c.Set(fmt.Sprintf("k%d", tc.sets-1), &Entry{TTL: 1})
			if c.Len() > tc.size || c.Len() < tc.wantMin {
				t.Errorf("Len %d, want %d..%d", c.Len(), tc.wantMin, tc.size)
			}
			if got := c.Evictions(); got != uint64(tc.sets-c.Len()) {
				t.Errorf("Evictions %d, want %d (sets - Len)", got, tc.sets-c.Len())
			}
		})
	}
}

func TestEvictionPrefersEarlyExpiry(t *testing.T) {
	// With 4 samples out of 5, the one expiring first is evicted unless it
	// was the one entry not sampled; over many rounds it almost always goes.
	kept := 0
	for range 200 {
		c := New(5, 0)
		c.Set("short", &Entry{TTL: 1})
		for i := range 4 {
			c.Set(fmt.Sprintf("long%d", i), &Entry{TTL: 1000})
		}
		c.Set("new", &Entry{TTL: 1000})
		if _, _, st := c.Get([]byte("short"), 0); st != Miss {
			kept++
		}
	}
	if kept > 100 {
		t.Errorf("the earliest-expiring entry survived %d of 200 evictions", kept)
	}
}

func TestConcurrentUse(t *testing.T) {
	c := New(1000, time.Minute)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 2000 {
				k := fmt.Sprintf("k%d", (i*7+g)%1500)
				c.Set(k, &Entry{TTL: 60})
				c.Get([]byte(k), 0)
			}
		})
	}
	wg.Wait()
	if c.Len() > 1000 {
		t.Errorf("Len %d over the bound", c.Len())
	}
}

func FuzzNewEntry(f *testing.F) {
	// Seeds: a plain reply, one with compression, and broken ones.
	for _, rrs := range [][]string{
		nil,
		{"a.example. 300 IN A 192.0.2.1"},
		{"a.example. 300 IN CNAME b.example.", "b.example. 300 IN MX 10 a.example."},
	} {
		b, qlen := packReply(f, "a.example.", rrs...)
		f.Add(b, uint8(qlen))
		f.Add(b[:len(b)-1], uint8(qlen))
	}
	f.Add([]byte{0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0xC0, 0x0C}, uint8(5)) // pointer, then cut
	f.Fuzz(func(t *testing.T, packed []byte, qlen uint8) {
		e, err := NewEntry(packed, int(qlen), 60, 0, false)
		if err != nil {
			return
		}
		q := make([]byte, qlen)
		out := e.AppendTo(nil, q, 5)
		if len(out) != 12+int(qlen)+len(e.Body) {
			t.Fatalf("reply %d bytes, want %d", len(out), 12+int(qlen)+len(e.Body))
		}
		for _, off := range e.TTLOffsets {
			if got := binary.BigEndian.Uint32(out[12+int(qlen)+int(off):]); got != 5 {
				t.Fatalf("TTL at %d = %d, want 5", off, got)
			}
		}
	})
}

func BenchmarkGet(b *testing.B) {
	c := New(10000, time.Hour)
	for i := range 10000 {
		c.Set(fmt.Sprintf("key-%d", i), &Entry{TTL: 3600})
	}
	key := []byte("key-4242")
	b.ReportAllocs()
	for b.Loop() {
		if _, _, st := c.Get(key, 0); st != Fresh {
			b.Fatal("miss")
		}
	}
}

// DeleteFunc drops exactly the entries it is told to, in every shard, and
// keeps Len right.
func TestDeleteFunc(t *testing.T) {
	packed, qlen := packReply(t, "a.example.", "a.example. 60 IN A 192.0.2.1")
	c := New(1000, time.Hour)
	for i := range 600 {
		e, err := NewEntry(packed, qlen, 60, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		c.Set(fmt.Sprintf("k%03d", i), e)
	}
	n := c.DeleteFunc(func(k string) bool { return k[len(k)-1] == '7' })
	if n != 60 || c.Len() != 540 {
		t.Errorf("dropped %d, %d left; want 60 and 540", n, c.Len())
	}
	if _, _, st := c.Get([]byte("k017"), 0); st != Miss {
		t.Errorf("k017 after DeleteFunc: %v, want Miss", st)
	}
	if _, _, st := c.Get([]byte("k018"), 0); st != Fresh {
		t.Errorf("k018 after DeleteFunc: %v, want Fresh", st)
	}
}

// Hit counts hits in a row within the window and starts over after a gap.
func TestEntryHit(t *testing.T) {
	packed, qlen := packReply(t, "a.example.", "a.example. 60 IN A 192.0.2.1")
	e, err := NewEntry(packed, qlen, 60, 0, false)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint32
	for _, at := range []time.Duration{time.Second, 2 * time.Second, 50 * time.Second, 200 * time.Second, 201 * time.Second} {
		got = append(got, e.Hit(int64(at), time.Minute))
	}
	if want := []uint32{1, 2, 3, 1, 2}; !slices.Equal(got, want) {
		t.Errorf("hits %v, want %v", got, want)
	}
	if !e.ClaimRefresh() || e.ClaimRefresh() {
		t.Error("ClaimRefresh: want true once")
	}
}
