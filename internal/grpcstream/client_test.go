package grpcstream

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/meshdns/meshdns/internal/testkit/certtest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Messages go both ways over h2c, TLS and mTLS, and a half-close ends the
// call with status OK (io.EOF).
func TestEcho(t *testing.T) {
	ca := certtest.NewCA(t, "test CA")
	srvCert, srvKey := ca.Issue(t, "server", true)
	cliCert, cliKey := ca.Issue(t, "agent", false)
	for _, tc := range []struct {
		name      string
		server    *tls.Config
		client    *tls.Config
		wantError Code // of Open or the first Recv, or OK
	}{
		{name: "h2c"},
		{name: "tls", server: certtest.ServerTLS(t, srvCert, srvKey, nil), client: certtest.ClientTLS(t, ca, nil, nil)},
		{name: "mtls", server: certtest.ServerTLS(t, srvCert, srvKey, ca), client: certtest.ClientTLS(t, ca, cliCert, cliKey)},
		{name: "mtls without a client certificate", server: certtest.ServerTLS(t, srvCert, srvKey, ca), client: certtest.ClientTLS(t, ca, nil, nil), wantError: Unavailable},
		{name: "tls to an untrusted server", server: certtest.ServerTLS(t, srvCert, srvKey, nil), client: certtest.ClientTLS(t, certtest.NewCA(t, "other CA"), nil, nil), wantError: Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startServer(t, tc.server)
			err := echo(t, Config{Addr: srv.addr, TLS: tc.client})
			mustCode(t, err, tc.wantError)
		})
	}
}

// echo runs an echo call of three messages and a half-close, and returns
// the first error (nil when the call ended with status OK).
func echo(t *testing.T, cfg Config) error {
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Open(t.Context(), chatMethod, nil)
	if err != nil {
		return err
	}
	defer s.Close()
	if err := s.Send([]byte("echo")); err != nil {
		return err
	}
	for _, m := range [][]byte{[]byte("first"), {}, pattern(100_000)} {
		if err := s.Send(m); err != nil {
			return err
		}
		r, n, err := s.Recv()
		if err != nil {
			return err
		}
		got, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		if n != len(m) || !bytes.Equal(got, m) {
			t.Fatalf("echo of %d bytes: got %d bytes (size %d)", len(m), len(got), n)
		}
	}
	if err := s.CloseSend(); err != nil {
		t.Fatalf("close send: %v", err)
	}
	if _, _, err := s.Recv(); err != io.EOF {
		t.Fatalf("recv after half-close: %v, want io.EOF", err)
	}
	if _, _, err := s.Recv(); err != io.EOF {
		t.Fatalf("second recv after the end: %v, want io.EOF again", err)
	}
	return nil
}

// The server sees the metadata as gRPC metadata.
func TestMetadata(t *testing.T) {
	srv := startServer(t, nil)
	c, err := New(Config{Addr: srv.addr})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Open(t.Context(), chatMethod, http.Header{"authorization": {"Bearer tok.en"}, "x-test": {"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Send([]byte("md")); err != nil {
		t.Fatal(err)
	}
	if got, want := string(recv(t, s)), "Bearer tok.en|a,b"; got != want {
		t.Errorf("server saw %q, want %q", got, want)
	}
}

// The server's status reaches the caller with its code and message, from
// the trailers after messages and from a trailers-only response, whatever
// bytes the message holds (grpc-message is percent-encoded).
func TestServerStatus(t *testing.T) {
	srv := startServer(t, nil)
	for _, tc := range []struct {
		name string
		code Code
		msg  string
	}{
		{name: "plain", code: FailedPrecondition, msg: "delta for base version v3"},
		{name: "percent and quotes", code: InvalidArgument, msg: `name "bad.example": 100% wrong`},
		{name: "non-ASCII and newline", code: Unauthenticated, msg: "jeton refusé\nsecond line\t✓"},
		{name: "empty message", code: PermissionDenied, msg: ""},
		{name: "unassigned code", code: 42, msg: "from the future"},
	} {
		for _, trailersOnly := range []bool{true, false} {
			name := tc.name + "/trailers"
			cmd := fmt.Sprintf("sendfail %d %s", tc.code, tc.msg)
			if trailersOnly {
				name = tc.name + "/trailers-only"
				cmd = fmt.Sprintf("fail %d %s", tc.code, tc.msg)
			}
			t.Run(name, func(t *testing.T) {
				s := open(t, t.Context(), Config{}, srv.addr, cmd)
				if !trailersOnly {
					if got := string(recv(t, s)); got != "one" {
						t.Fatalf("first message %q, want one", got)
					}
				}
				_, _, err := s.Recv()
				var st *Error
				if !errors.As(err, &st) {
					t.Fatalf("recv: %v, want an *Error", err)
				}
				if st.Code != tc.code || st.Message != tc.msg {
					t.Errorf("status %v %q, want %v %q", st.Code, st.Message, tc.code, tc.msg)
				}
				if _, _, again := s.Recv(); again != err {
					t.Errorf("second recv: %v, want the same error", again)
				}
			})
		}
	}
}

// A server that is not gRPC (a proxy's error page, a web server) gives the
// code the gRPC spec maps its HTTP status to.
func TestHTTPStatus(t *testing.T) {
	for _, tc := range []struct {
		status int
		ct     string
		want   Code
	}{
		{status: http.StatusNotFound, ct: "text/plain", want: Unimplemented},
		{status: http.StatusServiceUnavailable, ct: "text/html", want: Unavailable},
		{status: http.StatusUnauthorized, ct: "text/plain", want: Unauthenticated},
		{status: http.StatusForbidden, ct: "text/plain", want: PermissionDenied},
		{status: http.StatusBadRequest, ct: "text/plain", want: Internal},
		{status: http.StatusTeapot, ct: "text/plain", want: Unknown},
		{status: http.StatusOK, ct: "text/html", want: Unknown},
	} {
		t.Run(fmt.Sprint(tc.status, " ", tc.ct), func(t *testing.T) {
			addr := startHTTP(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", tc.ct)
				w.WriteHeader(tc.status)
				io.WriteString(w, "<html>not gRPC</html>")
			})
			c, err := New(Config{Addr: addr})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s, err := c.Open(t.Context(), chatMethod, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			// The server may have answered already: then Send fails,
			// with the same status.
			if err := s.Send([]byte("echo")); err != nil {
				mustCode(t, err, tc.want)
			}
			_, _, err = s.Recv()
			mustCode(t, err, tc.want)
		})
	}
}

// startHTTP serves h over h2c on loopback until the test ends.
func startHTTP(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	srv := &http.Server{Handler: h, Protocols: &p}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	return lis.Addr().String()
}

// A message larger than the receive windows streams through: Recv hands
// it over while most of it is still on the server (flow control holds it
// there until the caller reads), and it arrives whole.
func TestMessageLargerThanWindow(t *testing.T) {
	srv := startServer(t, nil)
	px := startProxy(t, srv.addr)
	const size = 4 << 20
	s := open(t, t.Context(), Config{StreamWindow: 64 << 10, ConnWindow: 64 << 10, MaxMessageSize: size}, px.addr, fmt.Sprint("big ", size))
	r, n, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if n != size {
		t.Fatalf("size %d, want %d", n, size)
	}
	// Give the server time to send what it may.
	time.Sleep(100 * time.Millisecond)
	if got := px.fromSrv.Load(); got > size/4 {
		t.Errorf("%d bytes came from the server before the message was read: the message was buffered", got)
	}
	got, err := io.ReadAll(r)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, pattern(size)) {
		t.Errorf("message of %d bytes differs from what was sent", len(got))
	}
	// The call goes on after it.
	if err := s.Send([]byte("after")); err != nil {
		t.Fatal(err)
	}
	if got := string(recv(t, s)); got != "after" {
		t.Errorf("echo %q, want after", got)
	}
}

// A message above MaxMessageSize fails the call with ResourceExhausted,
// and the server's side of the call ends too.
func TestMaxMessageSize(t *testing.T) {
	srv := startServer(t, nil)
	s := open(t, t.Context(), Config{MaxMessageSize: 1000}, srv.addr, "big 1001")
	_, _, err := s.Recv()
	mustCode(t, err, ResourceExhausted)
	select {
	case <-srv.ended:
	case <-time.After(10 * time.Second):
		t.Fatal("the server's call did not end")
	}
}

// A message that is exactly MaxMessageSize passes.
func TestMaxMessageSizeExact(t *testing.T) {
	srv := startServer(t, nil)
	s := open(t, t.Context(), Config{MaxMessageSize: 1000}, srv.addr, "big 1000")
	if got := recv(t, s); len(got) != 1000 {
		t.Fatalf("got %d bytes", len(got))
	}
}

// Keepalive pings find a server that stopped answering (here a proxy that
// stopped forwarding, connections left open) within KeepaliveTime plus
// KeepaliveTimeout, and fail the call as Unavailable.
func TestKeepaliveDetectsDeadPeer(t *testing.T) {
	srv := startServer(t, nil)
	px := startProxy(t, srv.addr)
	const ping, timeout = 200 * time.Millisecond, 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	s := open(t, ctx, Config{KeepaliveTime: ping, KeepaliveTimeout: timeout}, px.addr, "hang")
	if got := string(recv(t, s)); got != "ready" {
		t.Fatalf("got %q, want ready", got)
	}
	// Alive while the peer answers: pings come and go for a while.
	alive := make(chan error, 1)
	go func() { _, _, err := s.Recv(); alive <- err }()
	select {
	case err := <-alive:
		t.Fatalf("call ended while the server answered pings: %v", err)
	case <-time.After(3 * ping):
	}
	px.freeze()
	start := time.Now()
	err := <-alive
	mustCode(t, err, Unavailable)
	// Generous for a loaded machine; without pings the call would wait
	// for the context (30s).
	if d := time.Since(start); d > 10*(ping+timeout) {
		t.Errorf("dead peer found after %v, want about %v", d, ping+timeout)
	}
}

// Cancelling the context ends a call blocked in Recv with Canceled, and
// the server sees the call cancelled.
func TestCancel(t *testing.T) {
	srv := startServer(t, nil)
	ctx, cancel := context.WithCancel(t.Context())
	s := open(t, ctx, Config{}, srv.addr, "hang")
	recv(t, s)
	done := make(chan error, 1)
	go func() { _, _, err := s.Recv(); done <- err }()
	time.Sleep(20 * time.Millisecond)
	cancel()
	select {
	case err := <-done:
		mustCode(t, err, Canceled)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("error %v does not wrap context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("recv did not return after cancel")
	}
	select {
	case err := <-srv.ended:
		if err == nil {
			t.Error("server's call ended without its context cancelled")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the server's call did not end")
	}
	if err := s.Send([]byte("late")); codeOf(err) != Canceled {
		t.Errorf("send after cancel: %v, want Canceled", err)
	}
}

// Close, while another goroutine waits in Recv, ends the call too.
func TestCloseWhileReceiving(t *testing.T) {
	srv := startServer(t, nil)
	s := open(t, t.Context(), Config{}, srv.addr, "hang")
	recv(t, s)
	done := make(chan error, 1)
	go func() { _, _, err := s.Recv(); done <- err }()
	time.Sleep(20 * time.Millisecond)
	s.Close()
	select {
	case err := <-done:
		if codeOf(err) == OK {
			t.Fatalf("recv after close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("recv did not return after Close")
	}
}

// A refused connection fails Open at once, as Unavailable.
func TestRefused(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	c, err := New(Config{Addr: addr, ConnectTimeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.Open(t.Context(), chatMethod, nil)
	mustCode(t, err, Unavailable)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refused connection took %v", d)
	}
}

// A server that accepts the connection but never completes the TLS
// handshake fails Open within ConnectTimeout.
func TestConnectTimeout(t *testing.T) {
	addr := silentServer(t)
	ca := certtest.NewCA(t, "test CA")
	c, err := New(Config{Addr: addr, TLS: certtest.ClientTLS(t, ca, nil, nil), ConnectTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	_, err = c.Open(t.Context(), chatMethod, nil)
	mustCode(t, err, Unavailable)
	if d := time.Since(start); d < 300*time.Millisecond || d > 10*time.Second {
		t.Errorf("Open failed after %v, want about 300ms", d)
	}
}

// A server that accepts the connection but never speaks HTTP/2 (a hung
// process whose kernel still accepts) fails the call within
// ConnectTimeout, not the keepalive's much longer time.
func TestSilentServer(t *testing.T) {
	addr := silentServer(t)
	c, err := New(Config{Addr: addr, ConnectTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	s, err := c.Open(t.Context(), chatMethod, nil)
	if err == nil {
		defer s.Close()
		_, _, err = s.Recv()
	}
	mustCode(t, err, Unavailable)
	if d := time.Since(start); d < 300*time.Millisecond || d > 10*time.Second {
		t.Errorf("call failed after %v, want about 300ms (the keepalive would take %v)", d, c.cfg.KeepaliveTime+c.cfg.KeepaliveTimeout)
	}
}

// silentServer returns the address of a listener that accepts connections
// and never writes to them, until the test ends.
func silentServer(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		lis.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	return lis.Addr().String()
}

// A closed client opens no call.
func TestClosedClient(t *testing.T) {
	srv := startServer(t, nil)
	c, err := New(Config{Addr: srv.addr})
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close()
	if _, err := c.Open(t.Context(), chatMethod, nil); codeOf(err) == OK {
		t.Fatalf("open on a closed client: %v", err)
	}
}

func TestNewRejects(t *testing.T) {
	for _, addr := range []string{"", "no-port", "[::1"} {
		if _, err := New(Config{Addr: addr}); err == nil {
			t.Errorf("New(%q) accepted", addr)
		}
	}
}

// The call's request is what gRPC servers expect (PROTOCOL-HTTP2): an
// HTTP/2 POST to the method's path with the gRPC headers and the
// metadata, and the message framed in its body.
func TestRequest(t *testing.T) {
	got := make(chan *http.Request, 1)
	body := make(chan []byte, 1)
	addr := startHTTP(t, func(w http.ResponseWriter, r *http.Request) {
		got <- r
		b := make([]byte, 5+len("hello"))
		_, err := io.ReadFull(r.Body, b)
		if err != nil {
			t.Errorf("read request body: %v", err)
		}
		body <- b
		w.Header().Set("Content-Type", "application/grpc")
		w.Header().Set("Grpc-Status", "0")
	})
	c, err := New(Config{Addr: addr, UserAgent: "meshdns-agent/test"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := c.Open(t.Context(), chatMethod, http.Header{"authorization": {"Bearer x"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Send([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Recv(); err != io.EOF {
		t.Errorf("recv of a trailers-only OK: %v, want io.EOF", err)
	}
	r := <-got
	for _, c := range []struct{ what, got, want string }{
		{"protocol", r.Proto, "HTTP/2.0"},
		{"method", r.Method, http.MethodPost},
		{"path", r.URL.Path, chatMethod},
		{"content-type", r.Header.Get("Content-Type"), "application/grpc"},
		{"te", r.Header.Get("Te"), "trailers"},
		{"user-agent", r.Header.Get("User-Agent"), "meshdns-agent/test"},
		{"authorization", r.Header.Get("Authorization"), "Bearer x"},
		{"accept-encoding", r.Header.Get("Accept-Encoding"), ""},
		{"body", string(<-body), "\x00\x00\x00\x00\x05hello"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.what, c.got, c.want)
		}
	}
}

// A connection lost between messages or inside one is Unavailable (the
// caller reconnects), not a protocol error of the server's.
func TestConnectionLost(t *testing.T) {
	srv := startServer(t, nil)
	for _, inside := range []bool{false, true} {
		t.Run(fmt.Sprint("inside a message: ", inside), func(t *testing.T) {
			px := startProxy(t, srv.addr)
			cfg := Config{StreamWindow: 64 << 10, ConnWindow: 64 << 10, MaxMessageSize: 4 << 20}
			if !inside {
				s := open(t, t.Context(), cfg, px.addr, "hang")
				recv(t, s)
				px.cut()
				_, _, err := s.Recv()
				mustCode(t, err, Unavailable)
				return
			}
			s := open(t, t.Context(), cfg, px.addr, fmt.Sprint("big ", 4<<20))
			r, _, err := s.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(r, make([]byte, 1000)); err != nil {
				t.Fatal(err)
			}
			px.cut()
			_, err = io.Copy(io.Discard, r)
			mustCode(t, err, Unavailable)
			if _, _, again := s.Recv(); again != err {
				t.Errorf("recv after the loss: %v, want %v again", again, err)
			}
		})
	}
}
