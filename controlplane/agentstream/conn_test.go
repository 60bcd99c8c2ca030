package agentstream

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/meshdns/meshdns/internal/testkit/certtest"
)

// A connection that stalls before its preface is closed after
// HandshakeTimeout, plaintext or TLS, before or after the TLS handshake.
func TestHandshakeTimeout(t *testing.T) {
	ca := certtest.NewCA(t, "test ca")
	srvCert, srvKey := ca.Issue(t, "controlplane", true)
	serverTLS := certtest.ServerTLS(t, srvCert, srvKey, nil)
	tests := []struct {
		name   string
		tls    *tls.Config
		client func(net.Conn) net.Conn // what the client does before it stalls
	}{
		{name: "plaintext, silent", client: func(c net.Conn) net.Conn { return c }},
		{name: "TLS, silent before its ClientHello", tls: serverTLS, client: func(c net.Conn) net.Conn { return c }},
		{name: "TLS, silent after the handshake", tls: serverTLS, client: func(c net.Conn) net.Conn {
			cfg := certtest.ClientTLS(t, ca, nil, nil)
			cfg.NextProtos = []string{"h2"}
			tc := tls.Client(c, cfg)
			if err := tc.Handshake(); err != nil {
				t.Fatal(err)
			}
			return tc
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, addr := newTestServer(t, Config{Handler: newTestHandler(), TLS: tc.tls, HandshakeTimeout: 100 * time.Millisecond})
			raw, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			conn := tc.client(raw)
			_ = raw.SetReadDeadline(time.Now().Add(10 * time.Second))
			// The server's SETTINGS come only after the preface; then the end.
			if _, err := io.Copy(io.Discard, conn); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatal("the server did not close the connection")
				}
			}
		})
	}
}

// validConn is a client's bytes that open the test method's stream and
// send a message, a ping, a window update, then half-close.
func validConn() []byte {
	var b bytes.Buffer
	b.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&b, nil)
	_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
	var hb bytes.Buffer
	e := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", testMethod},
		{":authority", "x"}, {"content-type", "application/grpc"}} {
		_ = e.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
	_ = fr.WriteData(1, false, grpcFrame([]byte("first")))
	_ = fr.WritePing(false, [8]byte{1})
	_ = fr.WriteWindowUpdate(1, 100)
	_ = fr.WriteData(1, true, grpcFrame([]byte("second")))
	return b.Bytes()
}

// FuzzConn: whatever a client sends, the server neither panics nor
// hangs: it answers, or closes the connection, and its goroutines end
// (the test server's Close waits for them).
func FuzzConn(f *testing.F) {
	valid := validConn()
	f.Add(valid)                                                                          // a whole stream
	f.Add(valid[:len(valid)-7])                                                           // cut inside the last frame
	f.Add(append([]byte(nil), valid[:24]...))                                             // the preface only
	f.Add([]byte("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x04\x08\x00\x00\x00\x00\x00")) // a bad WINDOW_UPDATE
	f.Add([]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"))                                    // HTTP/1
	h := newTestHandler()
	h.reply = echo
	h.ended = make(chan error, 1<<16)
	h.st = make(chan *Stream, 1<<16)
	_, addr := newTestServer(f, Config{Handler: h, HandshakeTimeout: 2 * time.Second})
	f.Fuzz(func(t *testing.T, data []byte) {
		conn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		go func() {
			_, _ = conn.Write(data)
			_ = conn.(*net.TCPConn).CloseWrite()
		}()
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.Copy(io.Discard, conn); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatal("the server neither answered nor closed the connection")
			}
		}
	})
}

// HandshakeTimeout bounds the handshake and the preface only: a client
// that opens its stream later (a busy agent process) is still served.
func TestSlowFirstRequestIsServed(t *testing.T) {
	h := newTestHandler()
	h.reply = echo
	_, addr := newTestServer(t, Config{Handler: h, HandshakeTimeout: 50 * time.Millisecond})
	c := dialRaw(t, addr)
	c.until("the server's SETTINGS", func(f http2.Frame) bool { _, ok := f.(*http2.SettingsFrame); return ok })
	time.Sleep(200 * time.Millisecond) // four times HandshakeTimeout
	c.open(1, testMethod)
	c.send(1, []byte("late"), false)
	c.until("the echo", isData)
}

// A client that sends frames but never a request is closed once it sent
// maxRouteBytes: what is read before the route is known is kept for a
// hand-off, so it must not grow until the deadline.
func TestFramesWithoutRequestBounded(t *testing.T) {
	_, addr := newTestServer(t, Config{Handler: newTestHandler()})
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	go func() { _, _ = io.Copy(io.Discard, conn) }()
	var b bytes.Buffer
	b.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&b, nil)
	_ = fr.WriteSettings()
	for b.Len() < 1<<20 {
		_ = fr.WriteWindowUpdate(0, 1)
	}
	const total = 32 << 20
	for sent := 0; sent < total; sent += b.Len() {
		if _, err := conn.Write(b.Bytes()); err != nil {
			return // closed by the server
		}
		b.Reset()
		for b.Len() < 1<<20 {
			_ = fr.WriteWindowUpdate(0, 1)
		}
	}
	t.Fatalf("the server read %d MiB of frames without a request", total>>20)
}

// failingListener fails its first fails Accepts as a process out of file
// descriptors does.
type failingListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return l.Listener.Accept()
}

// Running out of file descriptors does not end Serve (and with it the
// control plane): it waits and accepts again, as grpc-go's Serve.
func TestServeOutlivesAcceptFailures(t *testing.T) {
	h := newTestHandler()
	h.reply = echo
	s, err := New(Config{Method: testMethod, Handler: h})
	if err != nil {
		t.Fatal(err)
	}
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lis := &failingListener{Listener: inner}
	lis.fails.Store(3)
	served := make(chan error, 1)
	go func() { served <- s.Serve(lis) }()
	t.Cleanup(func() { s.Close(); inner.Close(); <-served })
	c := dialRaw(t, inner.Addr().String())
	c.open(1, testMethod)
	c.send(1, []byte("still here"), false)
	c.until("the echo", isData)
	select {
	case err := <-served:
		t.Fatalf("Serve ended: %v", err)
	default:
	}
}
