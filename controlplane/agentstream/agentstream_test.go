package agentstream

import (
	"bytes"
	"context"
	"errors"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

func echo(st *Stream, msg []byte) { _ = st.Send([][]byte{msg}) }

// fieldValue is the value of a regular header field, or "".
func fieldValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

func isHeaders(f http2.Frame) bool { _, ok := f.(*http2.MetaHeadersFrame); return ok }
func isData(f http2.Frame) bool    { _, ok := f.(*http2.DataFrame); return ok }

func TestEchoAndHalfClose(t *testing.T) {
	h := newTestHandler()
	h.reply = echo
	_, addr := newTestServer(t, Config{Handler: h})
	c := dialRaw(t, addr)
	c.open(1, testMethod)
	c.send(1, []byte("hello"), false)
	hdr := c.until("response headers", isHeaders).(*http2.MetaHeadersFrame)
	if got := hdr.PseudoValue("status"); got != "200" {
		t.Fatalf(":status %q, want 200", got)
	}
	d := c.until("the echo", isData).(*http2.DataFrame)
	if want := grpcFrame([]byte("hello")); !bytes.Equal(d.Data(), want) {
		t.Fatalf("echo %q, want %q", d.Data(), want)
	}
	c.send(1, []byte("bye"), true)
	tr := c.until("trailers", isHeaders).(*http2.MetaHeadersFrame)
	if got := fieldValue(tr, "grpc-status"); got != "0" || !tr.StreamEnded() {
		t.Fatalf("trailers grpc-status %q (end %v), want 0 ending the stream", got, tr.StreamEnded())
	}
	if err := <-h.ended; !errors.Is(err, io.EOF) {
		t.Fatalf("Closed(%v), want io.EOF", err)
	}
}

// The server sends no more than the client's windows allow, and the rest
// when the client opens them.
func TestFlowControl(t *testing.T) {
	const size, window = 100_000, 1000
	h := newTestHandler()
	h.reply = func(st *Stream, _ []byte) { _ = st.Send([][]byte{make([]byte, size)}) }
	_, addr := newTestServer(t, Config{Handler: h})
	c := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: window})
	c.open(1, testMethod)
	c.send(1, []byte("go"), false)
	got := 0
	for got < window {
		d := c.until("data", isData).(*http2.DataFrame)
		got += len(d.Data())
	}
	// Whatever the server wrote beyond the window would come before the
	// answer to a ping sent now: the send wrote what it could at once.
	if err := c.fr.WritePing(false, [8]byte{1}); err != nil {
		t.Fatal(err)
	}
	c.until("the ping's ack", func(f http2.Frame) bool {
		if d, ok := f.(*http2.DataFrame); ok {
			got += len(d.Data())
		}
		p, ok := f.(*http2.PingFrame)
		return ok && p.IsAck()
	})
	if got != window {
		t.Fatalf("got %d bytes before opening the window, want %d", got, window)
	}
	for got < size+5 {
		if err := c.fr.WriteWindowUpdate(0, 20_000); err != nil {
			t.Fatal(err)
		}
		if err := c.fr.WriteWindowUpdate(1, 20_000); err != nil {
			t.Fatal(err)
		}
		granted := got + 20_000
		for got < min(granted, size+5) {
			d := c.until("data", isData).(*http2.DataFrame)
			got += len(d.Data())
		}
		if got > granted {
			t.Fatalf("got %d bytes with %d granted", got, granted)
		}
	}
}

// A send never waits for the client: a client that reads nothing gets
// megabytes queued, and the sender goes on.
func TestSendNeverBlocks(t *testing.T) {
	const msgs, size = 8, 1 << 20
	h := newTestHandler()
	_, addr := newTestServer(t, Config{Handler: h})
	c := dialRaw(t, addr, http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1})
	if err := c.fr.WriteWindowUpdate(0, 1<<31-1-65535); err != nil {
		t.Fatal(err)
	}
	c.open(1, testMethod)
	c.send(1, []byte("go"), false)
	st := <-h.st
	for i := range msgs {
		if err := st.Send([][]byte{make([]byte, size)}); err != nil {
			t.Fatalf("send %d: %v", i, err)
		}
	}
	// Now read it all: nothing was lost.
	got := 0
	for got < msgs*(size+5) {
		d := c.until("data", isData).(*http2.DataFrame)
		got += len(d.Data())
	}
}

func TestSecondStreamRefused(t *testing.T) {
	_, _, c := echoed(t, Config{})
	c.open(3, testMethod)
	f := c.until("the refusal", func(f http2.Frame) bool { _, ok := f.(*http2.RSTStreamFrame); return ok }).(*http2.RSTStreamFrame)
	if f.StreamID != 3 || f.ErrCode != http2.ErrCodeRefusedStream {
		t.Fatalf("RST_STREAM %d %v, want 3 REFUSED_STREAM", f.StreamID, f.ErrCode)
	}
}

func TestRefusals(t *testing.T) {
	tests := []struct {
		name   string
		path   string
		msg    []byte
		status string
	}{
		{name: "message above MaxRecvMsgSize", path: testMethod, msg: make([]byte, 11), status: "8"},
		{name: "another method on a routed connection", path: "/other.Service/Method", status: "12"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, c := echoed(t, Config{MaxRecvMsgSize: 10})
			if tc.msg != nil {
				c.send(1, tc.msg, false)
			} else {
				// The first stream ends; the next one asks for another method.
				c.send(1, nil, true)
				c.until("trailers", isHeaders)
				c.open(3, tc.path)
			}
			tr := c.until("trailers", func(f http2.Frame) bool {
				m, ok := f.(*http2.MetaHeadersFrame)
				return ok && fieldValue(m, "grpc-status") != "" && fieldValue(m, "grpc-status") != "0"
			}).(*http2.MetaHeadersFrame)
			if got := fieldValue(tr, "grpc-status"); got != tc.status {
				t.Fatalf("grpc-status %s (%s), want %s", got, fieldValue(tr, "grpc-message"), tc.status)
			}
		})
	}
}

func TestCloseSendsGoAway(t *testing.T) {
	s, h, c := echoed(t, Config{})
	go s.Close()
	g := c.until("GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
	if g.ErrCode != http2.ErrCodeNo || g.LastStreamID != 1 {
		t.Fatalf("GOAWAY %v last stream %d, want NO_ERROR 1", g.ErrCode, g.LastStreamID)
	}
	if err := <-h.ended; err == nil {
		t.Fatal("the stream's Closed got no error")
	}
}

func TestPingFloodGoesAway(t *testing.T) {
	_, _, c := echoed(t, Config{KeepaliveMinTime: time.Hour})
	for i := range 4 {
		if err := c.fr.WritePing(false, [8]byte{byte(i)}); err != nil {
			break // the server may have closed already
		}
	}
	g := c.until("GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
	if g.ErrCode != http2.ErrCodeEnhanceYourCalm || string(g.DebugData()) != "too_many_pings" {
		t.Fatalf("GOAWAY %v %q, want ENHANCE_YOUR_CALM too_many_pings", g.ErrCode, g.DebugData())
	}
}

// A connection that answers nothing is pinged, then closed, and its
// stream's Closed called.
func TestKeepaliveClosesSilentConnection(t *testing.T) {
	h := newTestHandler()
	h.reply = echo
	_, addr := newTestServer(t, Config{Handler: h, KeepaliveTime: 20 * time.Millisecond, KeepaliveTimeout: 20 * time.Millisecond})
	c := dialRaw(t, addr)
	c.open(1, testMethod)
	c.send(1, []byte("hi"), false)
	var pinged atomic.Bool
	if err := c.readToEnd(func(f http2.Frame) {
		if p, ok := f.(*http2.PingFrame); ok && !p.IsAck() {
			pinged.Store(true)
		}
	}); err != nil {
		t.Fatal(err)
	}
	if !pinged.Load() {
		t.Fatal("the connection ended without a ping")
	}
	if err := <-h.ended; err == nil {
		t.Fatal("the stream's Closed got no error")
	}
}

// An answered ping keeps the connection: the server's ping is acked and
// the stream goes on.
func TestKeepaliveKeepsAnsweringConnection(t *testing.T) {
	h := newTestHandler()
	h.reply = echo
	_, addr := newTestServer(t, Config{Handler: h, KeepaliveTime: 20 * time.Millisecond, KeepaliveTimeout: 20 * time.Millisecond})
	c := dialRaw(t, addr)
	c.open(1, testMethod)
	c.send(1, []byte("hi"), false)
	for range 5 {
		p := c.until("a ping", func(f http2.Frame) bool { p, ok := f.(*http2.PingFrame); return ok && !p.IsAck() }).(*http2.PingFrame)
		if err := c.fr.WritePing(true, p.Data); err != nil {
			t.Fatal(err)
		}
	}
	c.send(1, []byte("still here"), false)
	d := c.until("the echo", func(f http2.Frame) bool {
		d, ok := f.(*http2.DataFrame)
		return ok && bytes.Contains(d.Data(), []byte("still here"))
	})
	_ = d
	_ = context.Background()
}

// A client that sends frames the server must answer (SETTINGS here) and
// reads nothing stops being read once 64 KiB of answers wait: they do
// not pile up to the 16 MiB a slow reader of tables may leave unread.
func TestUnreadAnswersBounded(t *testing.T) {
	h := newTestHandler()
	s, addr := newTestServer(t, Config{Handler: h})
	c := dialRaw(t, addr)
	c.open(1, testMethod)
	c.send(1, []byte("go"), false)
	<-h.st
	nb := onlyConn(t, s).nb
	flood := make(chan error, 1)
	go func() {
		var b bytes.Buffer
		fr := http2.NewFramer(&b, nil)
		for range 64 {
			b.Reset()
			for b.Len() < 1<<20 {
				_ = fr.WriteSettings()
			}
			if _, err := c.conn.Write(b.Bytes()); err != nil {
				flood <- err
				return
			}
		}
		flood <- nil
	}()
	for {
		nb.mu.Lock()
		backlog, waiting := len(nb.pending)+nb.inflight, nb.waiters > 0
		nb.mu.Unlock()
		if backlog > maxBacklog+1<<10 {
			t.Fatalf("%d bytes of answers wait to be written", backlog)
		}
		if waiting {
			return // the reader stopped; the cleanup ends the flood
		}
		select {
		case err := <-flood:
			t.Fatalf("the server read a 64 MiB flood of SETTINGS (%v)", err)
		case <-time.After(time.Millisecond):
		}
	}
}

// onlyConn is s's one routed connection.
func onlyConn(t testing.TB, s *Server) *conn {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.conns) != 1 {
		t.Fatalf("%d connections, want 1", len(s.conns))
	}
	for c := range s.conns {
		return c
	}
	return nil
}
