package server_test

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshdns/meshdns/controlplane/internal/cptest"
)

// blackhole forwards TCP to target until frozen, then silently drops
// everything in both directions without closing: a node that vanished.
type blackhole struct {
	lis    net.Listener
	frozen atomic.Bool
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  []net.Conn
}

func newBlackhole(t *testing.T, target string) *blackhole {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{lis: lis}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			b.mu.Lock()
			b.conns = append(b.conns, c, s)
			b.mu.Unlock()
			b.wg.Add(2)
			go func() { defer b.wg.Done(); b.pipe(s, c) }()
			go func() { defer b.wg.Done(); b.pipe(c, s) }()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		b.mu.Lock()
		for _, c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
		b.wg.Wait()
	})
	return b
}

func (b *blackhole) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if b.frozen.Load() {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}

// TestServerPingsDropDeadAgents: an agent whose node vanished (no FIN, no
// RST) is detected by the server's keepalive pings and its stream ends.
func TestServerPingsDropDeadAgents(t *testing.T) {
	h := newHarness(t, harnessOpts{keepalive: time.Second})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	bh := newBlackhole(t, h.addr)
	a := cptest.Dial(t, bh.lis.Addr().String(), cptest.DialOpts{Namespace: "ns"})
	a.Next()
	waitFor(t, "agent connected", func() bool { return h.metric(t, "meshdns_controlplane_agents_connected") == 1 })
	bh.frozen.Store(true)
	start := time.Now()
	deadline := time.Now().Add(10 * time.Second)
	for h.metric(t, "meshdns_controlplane_agents_connected") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("dead agent still connected after 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Time (1s) + Timeout (1s), with slack for a loaded machine.
	if d := time.Since(start); d > 6*time.Second {
		t.Errorf("dead agent dropped after %v", d)
	}
}
