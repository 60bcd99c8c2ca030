package dnstap

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// runWriter starts w.Run and stops it at cleanup, checking it returns.
func runWriter(t testing.TB, w *Writer) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := w.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); wg.Wait() }) }
	t.Cleanup(stop)
	return stop
}

// Frames reach a collector over a unix socket and over TCP in the order
// sent, and the stream ends with STOP/FINISH when Run's context ends.
func TestWriterDelivers(t *testing.T) {
	for _, network := range []string{"unix", "tcp"} {
		t.Run(network, func(t *testing.T) {
			c := startCollector(t, network)
			w, err := New(Config{Address: c.addr})
			if err != nil {
				t.Fatal(err)
			}
			stop := runWriter(t, w)
			for i := range 100 {
				if !w.Send(fmt.Appendf(nil, "frame %d", i)) {
					t.Fatalf("frame %d dropped", i)
				}
			}
			for i := range 100 {
				if got, want := string(c.next(t)), fmt.Sprintf("frame %d", i); got != want {
					t.Fatalf("frame %q, want %q", got, want)
				}
			}
			eventually(t, "100 sent", func() bool { return w.Stats().Sent == 100 })
			stop()
			if s := w.Stats(); s.Connects != 1 || s.Connected || s.QueueFull != 0 || s.WriteFailed != 0 {
				t.Errorf("stats %+v", s)
			}
		})
	}
}

// With no collector, Send never blocks: the queue fills and the rest is
// dropped and counted; once a collector listens, the queued frames reach
// it.
func TestWriterQueueBoundAndReconnect(t *testing.T) {
	path := t.TempDir() + "/late.sock"
	w, err := New(Config{Address: "unix://" + path, QueueSize: 8, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runWriter(t, w)
	sent := 0
	for i := range 20 {
		if w.Send(fmt.Appendf(nil, "f%d", i)) {
			sent++
		}
	}
	if sent != 8 {
		t.Errorf("%d frames queued, want 8", sent)
	}
	if s := w.Stats(); s.QueueFull != 12 {
		t.Errorf("queue_full %d, want 12", s.QueueFull)
	}
	eventually(t, "failed dials counted", func() bool { return w.Stats().ConnectErrors > 0 })

	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{ln: ln, accept: ContentType, frames: make(chan []byte, 64), conns: make(chan net.Conn, 4)}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.serve(conn)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	for i := range 8 {
		if got, want := string(c.next(t)), fmt.Sprintf("f%d", i); got != want {
			t.Fatalf("frame %q, want %q", got, want)
		}
	}
}

// A collector that goes away is dialled again; frames sent after it came
// back reach it.
func TestWriterCollectorRestart(t *testing.T) {
	c := startCollector(t, "tcp")
	w, err := New(Config{Address: c.addr, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runWriter(t, w)
	w.Send([]byte("before"))
	if got := string(c.next(t)); got != "before" {
		t.Fatalf("got %q", got)
	}
	(<-c.conns).Close() // the collector drops the connection
	eventually(t, "a second connection", func() bool { return w.Stats().Connects >= 2 })
	w.Send([]byte("after"))
	if got := string(c.next(t)); got != "after" {
		t.Fatalf("got %q", got)
	}
}

// A collector that does not accept dnstap is refused at the handshake,
// counted as a failed connect, and no frame is written to it.
func TestWriterContentTypeRefused(t *testing.T) {
	c := startCollector(t, "unix")
	c.accept = "protobuf:other.Thing"
	w, err := New(Config{Address: c.addr, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	runWriter(t, w)
	w.Send([]byte("x"))
	eventually(t, "refused handshakes", func() bool { return w.Stats().ConnectErrors >= 2 })
	if s := w.Stats(); s.Connects != 0 || s.Sent != 0 {
		t.Errorf("stats %+v", s)
	}
}

// A collector that stops reading stalls no sender: Send returns at once
// and, the queue full, drops.
func TestWriterStalledCollector(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		readControl(conn) // READY
		conn.Write(appendControl(nil, controlAccept, ContentType))
		readControl(conn) // START, then never read again
		accepted <- conn
	}()
	w, err := New(Config{Address: "tcp://" + ln.Addr().String(), QueueSize: 16, Timeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	runWriter(t, w)
	conn := <-accepted
	defer conn.Close()
	big := []byte(strings.Repeat("x", 64<<10))
	dropped := false
	for i := 0; i < 10000 && !dropped; i++ {
		dropped = !w.Send(big)
	}
	if !dropped || w.Stats().QueueFull == 0 {
		t.Fatalf("no frame dropped against a stalled collector: %+v", w.Stats())
	}
}

func TestParseAddress(t *testing.T) {
	for _, tc := range []struct {
		in, network, address string
		err                  bool
	}{
		{in: "unix:///run/dnstap.sock", network: "unix", address: "/run/dnstap.sock"},
		{in: "tcp://127.0.0.1:6000", network: "tcp", address: "127.0.0.1:6000"},
		{in: "tcp://[::1]:6000", network: "tcp", address: "[::1]:6000"},
		{in: "tcp://127.0.0.1", err: true},
		{in: "unix://", err: true},
		{in: "/run/dnstap.sock", err: true},
		{in: "udp://127.0.0.1:6000", err: true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			n, a, err := ParseAddress(tc.in)
			if (err != nil) != tc.err || n != tc.network || a != tc.address {
				t.Errorf("ParseAddress(%q) = %q, %q, %v", tc.in, n, a, err)
			}
		})
	}
}
