package cache

import (
	"fmt"
	"runtime"
	"testing"
	"time"
)

// TestMemoryPerEntry bounds what a typical entry costs (an A reply with two
// records: ~40 bytes of body) so a full default cache of 10,000 stays a small
// part of the agent's 30 MB budget.
func TestMemoryPerEntry(t *testing.T) {
	const n = 10000
	packed, qlen := packReply(t, "host.example.com.", "host.example.com. 60 IN A 192.0.2.1", "host.example.com. 60 IN A 192.0.2.2")
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("\x08host%04d\x07example\x03com\x00\x00\x01\x00\x01", i)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	c := New(n, time.Hour)
	for _, k := range keys {
		e, err := NewEntry(packed, qlen, 60, 0, false)
		if err != nil {
			t.Fatal(err)
		}
		c.Set(k, e)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("%.0f bytes per entry (%d-byte reply), %.1f MB for %d", per, len(packed), per*n/1e6, n)
	if per > 400 {
		t.Errorf("%.0f bytes per entry, want at most 400", per)
	}
	runtime.KeepAlive(c)
}
