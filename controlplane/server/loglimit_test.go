package server

import (
	"testing"
	"time"
)

func TestLogLimit(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLogLimit(2, 10*time.Second, func() time.Time { return now })
	step := func(key string, wantOK bool, wantDropped int) {
		t.Helper()
		ok, dropped := l.allow(key)
		if ok != wantOK || dropped != wantDropped {
			t.Fatalf("allow(%q) at %v = %v, %d; want %v, %d", key, now.Unix(), ok, dropped, wantOK, wantDropped)
		}
	}
	step("denied", true, 0)
	step("denied", true, 0)
	step("denied", false, 0)
	step("denied", false, 0)
	step("unauthenticated", true, 0) // keys are counted apart
	now = now.Add(9 * time.Second)
	step("denied", false, 0) // the window has not ended
	now = now.Add(time.Second)
	step("denied", true, 3) // a new window; the three dropped are reported once
	step("denied", true, 0)
	step("denied", false, 0)
}
