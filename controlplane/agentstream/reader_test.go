package agentstream

import (
	"bytes"
	"crypto/tls"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshdns/meshdns/internal/testkit/certtest"
)

// readersRunning counts the goroutines in a connection's reader.
func readersRunning() int {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	n := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "agentstream.(*conn).read") {
			n++
		}
	}
	return n
}

// idle reports whether no connection of s has a reader, by its state and
// on the goroutines' stacks, and then how many hold a read buffer.
func idle(s *Server) (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := 0
	for c := range s.conns {
		// A reader's last write to c.in comes before it parks, and the
		// next one's after it claims the connection, both under pmu.
		c.pmu.Lock()
		reading := c.reading
		if !reading && c.in.buf != nil {
			held++
		}
		c.pmu.Unlock()
		if reading {
			return false, 0
		}
	}
	return readersRunning() == 0, held
}

// waitIdle waits until no connection of s has a reader running (each
// returns once its socket has nothing more), within 10s (a bound for a
// reader that never returns, not a wait for an event), and returns how
// many connections then hold a read buffer.
func waitIdle(t *testing.T, s *Server) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		ok, held := idle(s)
		if ok {
			return held
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connection readers still run on idle connections", readersRunning())
		}
	}
}

// An idle connection costs no goroutine and no read buffer, and its next
// bytes are read: a whole frame, and a frame that came in two parts with
// the connection idle between them.
func TestIdleConnectionHasNoReader(t *testing.T) {
	s, _, c := echoed(t, Config{})
	if n := waitIdle(t, s); n != 0 {
		t.Fatalf("%d idle connections hold a read buffer, want none", n)
	}

	c.send(1, []byte("again"), false)
	d := c.until("the second echo", isData).(*http2.DataFrame)
	if want := grpcFrame([]byte("again")); !bytes.Equal(d.Data(), want) {
		t.Fatalf("echo %q, want %q", d.Data(), want)
	}
	waitIdle(t, s)

	var frame bytes.Buffer
	_ = http2.NewFramer(&frame, nil).WriteData(1, false, grpcFrame([]byte("in two parts")))
	b := frame.Bytes()
	if _, err := c.conn.Write(b[:6]); err != nil {
		t.Fatal(err)
	}
	waitIdle(t, s)
	if _, err := c.conn.Write(b[6:]); err != nil {
		t.Fatal(err)
	}
	d = c.until("the echo of the cut frame", isData).(*http2.DataFrame)
	if want := grpcFrame([]byte("in two parts")); !bytes.Equal(d.Data(), want) {
		t.Fatalf("echo %q, want %q", d.Data(), want)
	}
}

// With TLS too, a connection's reader returns when the socket has
// nothing more, keeping what it read of a record, and bytes wake it.
func TestIdleTLSConnectionWakes(t *testing.T) {
	ca := certtest.NewCA(t, "test ca")
	srvCert, srvKey := ca.Issue(t, "server", true)
	cliCert, cliKey := ca.Issue(t, "agent-1", false)
	h := newTestHandler()
	h.reply = echo
	s, addr := newTestServer(t, Config{Handler: h, TLS: certtest.ServerTLS(t, srvCert, srvKey, ca)})
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(certtest.ClientTLS(t, ca, cliCert, cliKey))))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	cs, err := cc.NewStream(t.Context(), &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, testMethod)
	if err != nil {
		t.Fatal(err)
	}
	for _, msg := range []string{"one", "two", strings.Repeat("three", 2000)} {
		if err := cs.SendMsg(wrapperspb.String(msg)); err != nil {
			t.Fatal(err)
		}
		got := new(wrapperspb.StringValue)
		if err := cs.RecvMsg(got); err != nil || got.Value != msg {
			t.Fatalf("echo of %.10q: %.10q, %v", msg, got.Value, err)
		}
		if n := waitIdle(t, s); n != 0 {
			t.Fatalf("%d idle connections hold a read buffer, want none", n)
		}
	}
	// A TLS record cut in two, the connection idle between the parts.
	raw, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	cut := &cutConn{Conn: raw, wait: func() { waitIdle(t, s) }}
	cfg := certtest.ClientTLS(t, ca, cliCert, cliKey)
	cfg.NextProtos = []string{"h2"}
	c := newRawClient(t, tls.Client(cut, cfg))
	c.open(1, testMethod)
	c.send(1, []byte("hello"), false)
	c.until("the echo", isData)
	cut.at = 20
	c.send(1, []byte("in two records' parts"), false)
	d := c.until("the echo of the cut record", isData).(*http2.DataFrame)
	if want := grpcFrame([]byte("in two records' parts")); !bytes.Equal(d.Data(), want) {
		t.Fatalf("echo %q, want %q", d.Data(), want)
	}
}

// cutConn writes its next write longer than at (once at is set) in two
// parts, calling wait between them.
type cutConn struct {
	net.Conn
	at   int
	wait func()
}

func (c *cutConn) Write(b []byte) (int, error) {
	if c.at == 0 || len(b) <= c.at {
		return c.Conn.Write(b)
	}
	at := c.at
	c.at = 0
	n, err := c.Conn.Write(b[:at])
	if err != nil {
		return n, err
	}
	c.wait()
	m, err := c.Conn.Write(b[at:])
	return n + m, err
}

func TestFrameNeed(t *testing.T) {
	frame := func(typ http2.FrameType, flags http2.Flags, n int) []byte {
		return append([]byte{byte(n >> 16), byte(n >> 8), byte(n), byte(typ), byte(flags), 0, 0, 0, 1}, make([]byte, n)...)
	}
	data := frame(http2.FrameData, 0, 10)
	headers := frame(http2.FrameHeaders, 0, 10)
	cont := frame(http2.FrameContinuation, 0, 10)
	contEnd := frame(http2.FrameContinuation, http2.FlagContinuationEndHeaders, 10)
	cat := func(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
	tests := []struct {
		name string
		b    []byte
		want int
	}{
		{"nothing", nil, 9},
		{"part of a header", data[:4], 9},
		{"a header", data[:9], 19},
		{"a frame and more", cat(data, data[:3]), 19},
		{"headers ending their block", frame(http2.FrameHeaders, http2.FlagHeadersEndHeaders, 10), 19},
		{"headers, then continuations to the end", cat(headers, cont, contEnd, data), 57},
		{"headers, continuations still to come", cat(headers, cont), 47},
		{"headers, then a frame not a continuation", cat(headers, data), 38},
		{"a frame too long for the framer", frame(http2.FrameData, 0, maxReadFrame+1)[:9], 9},
	}
	for _, tc := range tests {
		if got, err := frameNeed(tc.b); got != tc.want || err != nil {
			t.Errorf("%s: %d, %v; want %d", tc.name, got, err, tc.want)
		}
	}
	var chain []byte
	for chain = headers; len(chain) <= maxHeaderChain; chain = append(chain, frame(http2.FrameContinuation, 0, maxReadFrame)...) {
	}
	if _, err := frameNeed(chain); err == nil {
		t.Errorf("a header block of %d bytes: no error", len(chain))
	}
}

// A header block is gathered whole before the framer decodes it: one of
// more than 64 KiB closes the connection.
func TestLongHeaderBlockGoesAway(t *testing.T) {
	_, _, c := echoed(t, Config{})
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: make([]byte, 100)}); err != nil {
		t.Fatal(err)
	}
	go func() {
		for range 5 {
			if c.fr.WriteContinuation(3, false, make([]byte, maxReadFrame)) != nil {
				return
			}
		}
	}()
	g := c.until("GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
	if g.ErrCode != http2.ErrCodeProtocol {
		t.Fatalf("GOAWAY %v, want PROTOCOL_ERROR", g.ErrCode)
	}
}

// A frame longer than HTTP/2's default SETTINGS_MAX_FRAME_SIZE (the
// server's) closes the connection.
func TestLongFrameGoesAway(t *testing.T) {
	_, _, c := echoed(t, Config{})
	go func() { _ = c.fr.WriteData(1, false, make([]byte, maxReadFrame+1)) }()
	g := c.until("GOAWAY", func(f http2.Frame) bool { _, ok := f.(*http2.GoAwayFrame); return ok }).(*http2.GoAwayFrame)
	if g.ErrCode != http2.ErrCodeFrameSize {
		t.Fatalf("GOAWAY %v, want FRAME_SIZE_ERROR", g.ErrCode)
	}
}

// A client that sends its last message and closes at once puts the bytes
// and its FIN in the socket together, behind one wake-up: the reader must
// see the end then, not take its short read of the message for an empty
// socket and leave the stream open until the keepalive.
func TestLastMessageThenCloseEndsStream(t *testing.T) {
	h := newTestHandler()
	_, addr := newTestServer(t, Config{Handler: h, KeepaliveTime: time.Hour})
	for i := range 20 {
		c := dialRaw(t, addr)
		c.open(1, testMethod)
		c.send(1, []byte("hello"), false)
		<-h.st
		var frame bytes.Buffer
		_ = http2.NewFramer(&frame, nil).WriteData(1, false, grpcFrame([]byte("bye")))
		if _, err := c.conn.Write(frame.Bytes()); err != nil {
			t.Fatal(err)
		}
		c.conn.Close()
		select {
		case <-h.ended:
		case <-time.After(10 * time.Second): // a bound for a stream left open, not a wait for an event
			t.Fatalf("connection %d: its stream did not end when the client closed", i)
		}
	}
}
