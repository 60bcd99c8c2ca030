package server

import (
	"sync"
	"time"
)

// Refusals logged per result and window; the metric counts them all.
const (
	refusalLogBurst  = 10
	refusalLogWindow = 10 * time.Second
)

// logLimit lets at most burst messages per window through for each key and
// counts the rest, so that a fleet of agents retrying with a bad
// credential cannot flood the control plane's log: 10,000 of them backing
// off to a few seconds wrote thousands of lines a second, burying the
// lines an operator needs. Metrics still count every event.
type logLimit struct {
	burst  int
	window time.Duration
	now    func() time.Time

	mu   sync.Mutex
	keys map[string]*logWindow // few keys: the refusal results
}

type logWindow struct {
	start   time.Time
	logged  int // in the window that began at start
	dropped int // since the last message let through
}

func newLogLimit(burst int, window time.Duration, now func() time.Time) *logLimit {
	return &logLimit{burst: burst, window: window, now: now, keys: map[string]*logWindow{}}
}

// allow reports whether a message of key may be logged now and, if so, how
// many of key's messages were dropped since the last one logged.
func (l *logLimit) allow(key string) (ok bool, dropped int) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.keys[key]
	if w == nil {
		w = &logWindow{start: now}
		l.keys[key] = w
	}
	if now.Sub(w.start) >= l.window {
		w.start, w.logged = now, 0
	}
	if w.logged >= l.burst {
		w.dropped++
		return false, 0
	}
	w.logged++
	dropped, w.dropped = w.dropped, 0
	return true, dropped
}
