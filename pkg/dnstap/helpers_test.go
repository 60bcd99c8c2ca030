package dnstap

import (
	"encoding/binary"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// collector is a Frame Streams reader on a real socket, as a dnstap
// collector runs it: it accepts connections one at a time, answers READY
// with ACCEPT (of accept), and hands each data frame's payload to frames.
type collector struct {
	ln     net.Listener
	addr   string // for Config.Address
	accept string
	frames chan []byte
	// conns receives each accepted connection, so a test can cut it.
	conns chan net.Conn
}

func startCollector(t testing.TB, network string) *collector {
	t.Helper()
	var (
		ln   net.Listener
		err  error
		addr string
	)
	if network == "unix" {
		path := filepath.Join(t.TempDir(), "dnstap.sock")
		ln, err = net.Listen("unix", path)
		addr = "unix://" + path
	} else {
		ln, err = net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			addr = "tcp://" + ln.Addr().String()
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{ln: ln, addr: addr, accept: ContentType, frames: make(chan []byte, 4096), conns: make(chan net.Conn, 16)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			c.conns <- conn
			c.serve(conn)
		}
	}()
	t.Cleanup(func() { ln.Close(); <-done })
	return c
}

func (c *collector) serve(conn net.Conn) {
	defer conn.Close()
	if typ, _, err := readControl(conn); err != nil || typ != controlReady {
		return
	}
	if _, err := conn.Write(appendControl(nil, controlAccept, c.accept)); err != nil {
		return
	}
	if typ, _, err := readControl(conn); err != nil || typ != controlStart {
		return
	}
	for {
		var hdr [4]byte
		if _, err := io.ReadFull(conn, hdr[:]); err != nil {
			return
		}
		n := binary.BigEndian.Uint32(hdr[:])
		if n == 0 { // a control frame: STOP
			var l [4]byte
			if _, err := io.ReadFull(conn, l[:]); err != nil {
				return
			}
			body := make([]byte, binary.BigEndian.Uint32(l[:]))
			if _, err := io.ReadFull(conn, body); err != nil {
				return
			}
			if binary.BigEndian.Uint32(body) == controlStop {
				conn.Write(appendControl(nil, controlFinish))
			}
			return
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(conn, p); err != nil {
			return
		}
		c.frames <- p
	}
}

// next returns the next payload the collector read.
func (c *collector) next(t testing.TB) []byte {
	t.Helper()
	select {
	case p := <-c.frames:
		return p
	case <-time.After(patience()):
		t.Fatal("no frame reached the collector")
		return nil
	}
}

// patience bounds a wait for an event that should come at once: long, so
// a loaded machine does not fail the test, and only spent on failure.
func patience() time.Duration { return 60 * time.Second }

// eventually polls cond until it holds.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(patience())
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
