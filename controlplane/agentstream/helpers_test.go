package agentstream

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
)

const testMethod = "/test.Service/Stream"

// testHandler opens every stream, answers each message with reply(msg)
// and records what happened.
type testHandler struct {
	reply func(st *Stream, msg []byte)
	mu    sync.Mutex
	first []byte
	msgs  [][]byte
	ended chan error
	st    chan *Stream
}

func newTestHandler() *testHandler {
	return &testHandler{ended: make(chan error, 8), st: make(chan *Stream, 8)}
}

func (h *testHandler) Open(_ context.Context, st *Stream, first []byte) (Receiver, error) {
	h.mu.Lock()
	h.first = first
	h.mu.Unlock()
	h.st <- st
	if h.reply != nil {
		h.reply(st, first)
	}
	return &testReceiver{h: h, st: st}, nil
}

type testReceiver struct {
	h  *testHandler
	st *Stream
}

func (r *testReceiver) Message(b []byte) error {
	r.h.mu.Lock()
	r.h.msgs = append(r.h.msgs, append([]byte(nil), b...))
	r.h.mu.Unlock()
	if r.h.reply != nil {
		r.h.reply(r.st, b)
	}
	return nil
}

func (r *testReceiver) Closed(err error) error {
	r.h.ended <- err
	return nil
}

// newTestServer serves h on 127.0.0.1:0 until the test ends.
func newTestServer(t testing.TB, cfg Config) (*Server, string) {
	t.Helper()
	cfg.Method = testMethod
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// grpc-go serves the connections of other methods, as in the
	// control plane.
	g := grpc.NewServer()
	done := make(chan struct{}, 2)
	go func() { _ = g.Serve(s.Fallback()); done <- struct{}{} }()
	go func() { _ = s.Serve(lis); done <- struct{}{} }()
	t.Cleanup(func() { g.Stop(); s.Close(); lis.Close(); <-done; <-done })
	return s, lis.Addr().String()
}

// echoed serves an echoing handler with cfg and returns the server, the
// handler and a client whose stream 1 is open and had its first message
// echoed.
func echoed(t *testing.T, cfg Config) (*Server, *testHandler, *rawClient) {
	t.Helper()
	h := newTestHandler()
	h.reply = echo
	cfg.Handler = h
	s, addr := newTestServer(t, cfg)
	c := dialRaw(t, addr)
	c.open(1, testMethod)
	c.send(1, []byte("hello"), false)
	c.until("the echo", isData)
	return s, h, c
}

// rawClient is an HTTP/2 client made of a framer, to see the frames.
type rawClient struct {
	t    testing.TB
	conn net.Conn
	fr   *http2.Framer
}

func dialRaw(t testing.TB, addr string, settings ...http2.Setting) *rawClient {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	return newRawClient(t, conn, settings...)
}

// newRawClient starts HTTP/2 on conn (a TLS client's, say).
func newRawClient(t testing.TB, conn net.Conn, settings ...http2.Setting) *rawClient {
	t.Helper()
	t.Cleanup(func() { conn.Close() })
	c := &rawClient{t: t, conn: conn, fr: http2.NewFramer(conn, conn)}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(settings...); err != nil {
		t.Fatal(err)
	}
	return c
}

// open sends the headers of a call of path on stream id.
func (c *rawClient) open(id uint32, path string) {
	c.t.Helper()
	var b []byte
	w := &sliceWriter{b: &b}
	e := hpack.NewEncoder(w)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", path},
		{":authority", "test"}, {"content-type", "application/grpc"}, {"te", "trailers"}, {"authorization", "Bearer x"}} {
		_ = e.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: b, EndHeaders: true}); err != nil {
		c.t.Fatal(err)
	}
}

type sliceWriter struct{ b *[]byte }

func (w *sliceWriter) Write(p []byte) (int, error) { *w.b = append(*w.b, p...); return len(p), nil }

// send sends msg as one gRPC message on stream id.
func (c *rawClient) send(id uint32, msg []byte, end bool) {
	c.t.Helper()
	if err := c.fr.WriteData(id, end, grpcFrame(msg)); err != nil {
		c.t.Fatal(err)
	}
}

func grpcFrame(msg []byte) []byte {
	b := make([]byte, 5, 5+len(msg))
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

// next reads the next frame the server sends, within 10s (a bound for a
// hung server, not a wait for an event).
func (c *rawClient) next() (http2.Frame, error) {
	_ = c.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	return c.fr.ReadFrame()
}

// until reads frames until match returns true, and fails at the
// connection's end.
func (c *rawClient) until(what string, match func(http2.Frame) bool) http2.Frame {
	c.t.Helper()
	for {
		f, err := c.next()
		if err != nil {
			c.t.Fatalf("waiting for %s: %v", what, err)
		}
		if match(f) {
			return f
		}
	}
}

// readToEnd reads frames until the connection ends, calling see with
// each.
func (c *rawClient) readToEnd(see func(http2.Frame)) error {
	for {
		f, err := c.next()
		if err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return err
			}
			return nil // reset by the server
		}
		see(f)
	}
}
