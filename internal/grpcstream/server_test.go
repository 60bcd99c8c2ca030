package grpcstream

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// The tests talk to a real grpc-go server on loopback serving test.Chat,
// a bidirectional streaming method whose messages are raw bytes (the
// server's codec passes them through). The first message the client
// sends is a command:
//
//	echo              answer every message with itself, status OK at the client's half-close
//	md                answer with the authorization and x-test metadata, then echo
//	fail CODE MSG     end with that status before sending anything (a trailers-only response)
//	sendfail CODE MSG send "one", then end with that status (in trailers)
//	big N             send a message of N bytes, then echo
//	hang              send "ready", then wait for the call to end
const chatMethod = "/test.Chat/Talk"

// rawCodec hands the server's handler the message bytes as they are.
// Named "proto" so it serves the plain application/grpc content type.
type rawCodec struct{}

func (rawCodec) Name() string { return "proto" }

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(*v.(*[]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

// testServer is the running server.
type testServer struct {
	addr string
	// ended receives the handler's context error when a call ends.
	ended chan error
}

// startServer serves test.Chat on loopback until the test ends, with TLS
// when tlsCfg is set.
func startServer(t testing.TB, tlsCfg *tls.Config) *testServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ts := &testServer{addr: lis.Addr().String(), ended: make(chan error, 10)}
	opts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(rawCodec{}),
		// The keepalive test pings every few hundred milliseconds.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Millisecond, PermitWithoutStream: true}),
	}
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&grpc.ServiceDesc{
		ServiceName: "test.Chat",
		HandlerType: (*any)(nil),
		Streams: []grpc.StreamDesc{{
			StreamName: "Talk", ServerStreams: true, ClientStreams: true,
			Handler: func(_ any, st grpc.ServerStream) error {
				err := ts.talk(st)
				select {
				case ts.ended <- st.Context().Err():
				default:
				}
				return err
			},
		}},
	}, nil)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return ts
}

func (ts *testServer) talk(st grpc.ServerStream) error {
	var cmd []byte
	if err := st.RecvMsg(&cmd); err != nil {
		return err
	}
	word, rest, _ := strings.Cut(string(cmd), " ")
	switch word {
	case "echo":
	case "md":
		md, _ := metadata.FromIncomingContext(st.Context())
		b := []byte(strings.Join(md.Get("authorization"), ",") + "|" + strings.Join(md.Get("x-test"), ","))
		if err := st.SendMsg(&b); err != nil {
			return err
		}
	case "fail", "sendfail":
		c, msg, _ := strings.Cut(rest, " ")
		n, err := strconv.Atoi(c)
		if err != nil {
			return err
		}
		if word == "sendfail" {
			b := []byte("one")
			if err := st.SendMsg(&b); err != nil {
				return err
			}
		}
		return status.Error(codes.Code(n), msg)
	case "big":
		n, err := strconv.Atoi(rest)
		if err != nil {
			return err
		}
		b := pattern(n)
		if err := st.SendMsg(&b); err != nil {
			return err
		}
	case "hang":
		b := []byte("ready")
		if err := st.SendMsg(&b); err != nil {
			return err
		}
		<-st.Context().Done()
		return st.Context().Err()
	default:
		return status.Errorf(codes.InvalidArgument, "unknown command %q", cmd)
	}
	for {
		var m []byte
		if err := st.RecvMsg(&m); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if err := st.SendMsg(&m); err != nil {
			return err
		}
	}
}

// pattern returns n bytes that are not all alike, so a byte out of place
// shows.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i % 251)
	}
	return b
}

// proxy forwards TCP connections to a target on loopback, counting the
// bytes it forwards from the server, and stops forwarding (both ways,
// connections left open) when frozen: a peer that stopped answering.
type proxy struct {
	addr     string
	fromSrv  atomic.Int64
	mu       sync.Mutex // guards following
	frozen   chan struct{}
	thawed   chan struct{}
	conns    []net.Conn
	stopping bool
}

func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{addr: lis.Addr().String(), thawed: make(chan struct{})}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
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
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			wg.Add(2)
			go func() { defer wg.Done(); p.pipe(s, c, &p.fromSrv) }()
			go func() { defer wg.Done(); p.pipe(c, s, nil) }()
		}
	}()
	t.Cleanup(func() {
		lis.Close()
		p.mu.Lock()
		p.stopping = true
		close(p.thawed)
		for _, c := range p.conns {
			c.Close()
		}
		p.mu.Unlock()
		wg.Wait()
	})
	return p
}

// pipe copies from src to dst, holding what it read while frozen.
func (p *proxy) pipe(dst, src net.Conn, count *atomic.Int64) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			frozen := p.frozen != nil && !p.stopping
			thawed := p.thawed
			p.mu.Unlock()
			if frozen {
				<-thawed // until the test ends
				return
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
			if count != nil {
				count.Add(int64(n))
			}
		}
		if err != nil {
			return
		}
	}
}

// cut closes every forwarded connection, as a crashed server's kernel
// would.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// freeze stops all forwarding for good.
func (p *proxy) freeze() {
	p.mu.Lock()
	p.frozen = make(chan struct{})
	p.mu.Unlock()
}

// open opens a call on a new client with cfg (Addr defaults to addr) and
// sends cmd; both are closed when the test ends.
func open(t testing.TB, ctx context.Context, cfg Config, addr, cmd string) *Stream {
	t.Helper()
	if cfg.Addr == "" {
		cfg.Addr = addr
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s, err := c.Open(ctx, chatMethod, nil)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	if err := s.Send([]byte(cmd)); err != nil {
		t.Fatalf("send %q: %v", cmd, err)
	}
	return s
}

// recv receives one whole message.
func recv(t testing.TB, s *Stream) []byte {
	t.Helper()
	r, n, err := s.Recv()
	if err != nil {
		t.Fatalf("recv: %v", err)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("read message: %v", err)
	}
	if len(b) != n {
		t.Fatalf("read %d bytes of a %d-byte message", len(b), n)
	}
	return b
}

func mustCode(t testing.TB, err error, want Code) {
	t.Helper()
	if got := codeOf(err); got != want {
		t.Fatalf("error %v: code %v, want %v", err, got, want)
	}
}

// codeOf returns the status code of err: OK for nil, the code of an
// *Error in its chain, else Unknown.
func codeOf(err error) Code {
	if err == nil {
		return OK
	}
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return Unknown
}
