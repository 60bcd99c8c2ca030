package server

import (
	"context"
	"sync"
	"testing"
	"time"
)

// TestFanout checks that every queued agent is handed to the send function
// exactly once, that the queue is left empty, and that run returns when its
// context ends.
func TestFanout(t *testing.T) {
	f := newFanout()
	const n = 1000
	agents := make([]*agent, n)
	for i := range agents {
		agents[i] = &agent{pod: itoa(i)}
	}
	var mu sync.Mutex
	seen := map[*agent]int{}
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		f.run(ctx, func(a *agent) {
			mu.Lock()
			defer mu.Unlock()
			seen[a]++
			if len(seen) == n {
				close(done)
			}
		})
	}()
	for _, a := range agents {
		f.push(a)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%d of %d agents sent to", len(seen), n)
	}
	cancel()
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("run did not return after its context ended")
	}
	for a, k := range seen {
		if k != 1 {
			t.Errorf("agent %s sent to %d times", a.pod, k)
		}
	}
	if f.head != 0 || len(f.q) != 0 {
		t.Errorf("queue not drained: head %d len %d", f.head, len(f.q))
	}
}

func itoa(i int) string {
	b := []byte{}
	for {
		b = append([]byte{byte('0' + i%10)}, b...)
		if i /= 10; i == 0 {
			return string(b)
		}
	}
}
