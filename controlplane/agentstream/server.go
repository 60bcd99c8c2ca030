// Package agentstream serves one gRPC bidirectional streaming method (the
// agents' StreamNameTable) over a small HTTP/2 server of its own, and
// hands every other connection to grpc-go.
//
// grpc-go gives every stream a writer goroutine, a reader goroutine, a
// handler goroutine and a keepalive goroutine, and every message it sends
// passes through a queue to the writer: for ten thousand mostly idle
// agents that is most of the control plane's memory and CPU. Here a
// connection has a goroutine only while its socket has bytes, its reader
// (reader.go); a message is framed and written by the caller of
// Stream.Send (the fan-out worker) without a hand-off, and a message read
// is handed to the stream's Receiver on the reader. Writes never block
// the caller: what the socket does not take at once waits in the
// connection's buffer and a goroutine started for it flushes it
// (nbconn.go).
//
// A connection is routed by its first request: the server sends its
// SETTINGS, reads the client's preface and frames up to the first
// request's headers, and serves the connection itself when the request is
// Config.Method; otherwise grpc-go gets the connection (Fallback), with
// everything read so far replayed to it and the TLS handshake done.
package agentstream

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"syscall"
	"time"
)

// Handler serves the streams of Config.Method.
type Handler interface {
	// Open starts a stream with its first message, on a goroutine of its
	// own that may block (authentication, admission); the message's bytes
	// are the handler's. It returns the stream's Receiver, or the error
	// whose status (grpc status.Convert) ends the stream. The stream's
	// context carries the peer (grpc peer.FromContext, with TLS's
	// credentials.TLSInfo) and the request's headers as incoming metadata.
	Open(ctx context.Context, st *Stream, first []byte) (Receiver, error)
}

// Receiver gets a stream's later messages and its end.
type Receiver interface {
	// Message is one later message, on the connection's reader; b is
	// valid until it returns. An error ends the stream with its status.
	Message(b []byte) error
	// Closed is called once when the stream ended: err is io.EOF when
	// the client closed its side, a Canceled status when it reset the
	// stream, the connection's error when that was lost, or the error
	// given to Stream.End. It returns the status to end the stream with,
	// when the stream can still carry one.
	Closed(err error) error
}

// Config configures a Server. Zero values take the defaults named.
type Config struct {
	// Method is the one method served, "/package.Service/Method"; required.
	Method string
	// Handler serves it; required.
	Handler Handler
	// TLS, when set, serves TLS (HTTP/2 by ALPN); nil serves h2c.
	TLS *tls.Config
	// HandshakeTimeout bounds a connection's TLS handshake, preface and
	// first request's headers; 10s.
	HandshakeTimeout time.Duration
	// KeepaliveTime is how long a connection may bring nothing before the
	// server pings it, KeepaliveTimeout how long the server then waits for
	// anything before it closes the connection; 30s and 10s.
	KeepaliveTime, KeepaliveTimeout time.Duration
	// KeepaliveMinTime is the shortest interval between a client's pings
	// tolerated: the third ping sooner than that closes the connection
	// with GOAWAY ENHANCE_YOUR_CALM, as grpc-go's enforcement policy; 10s.
	KeepaliveMinTime time.Duration
	// MaxRecvMsgSize bounds one message from a client; 64 KiB.
	MaxRecvMsgSize int
	// MaxConcurrentStreams is advertised before the connection is routed
	// (what grpc-go advertises); 8. A routed connection serves one stream
	// at a time.
	MaxConcurrentStreams uint32
	// Admit, when set, is asked before a stream starts, with the
	// connection's remote address; an error refuses the stream with its
	// status.
	Admit func(remote net.Addr) error
	// Logger; nil discards.
	Logger *slog.Logger
}

// Server serves Config.Method's streams.
type Server struct {
	cfg      Config
	tls      *tls.Config
	log      *slog.Logger
	fallback *fallbackListener
	ctx      context.Context
	cancel   context.CancelFunc

	mu     sync.Mutex // guards following
	conns  map[*conn]struct{}
	closed bool
	poll   *poller // made with the first routed connection; nil without
	noPoll bool    // the poller could not be made
	// wg counts every goroutine of the server's connections, and every
	// routed connection until its reader ended it (its reader runs only
	// while the socket has bytes).
	wg sync.WaitGroup
}

// New checks cfg and returns a Server; it does no I/O.
func New(cfg Config) (*Server, error) {
	if cfg.Method == "" || cfg.Handler == nil {
		return nil, errors.New("agentstream: Method and Handler are required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.HandshakeTimeout, 10*time.Second)
	def(&cfg.KeepaliveTime, 30*time.Second)
	def(&cfg.KeepaliveTimeout, 10*time.Second)
	def(&cfg.KeepaliveMinTime, 10*time.Second)
	if cfg.MaxRecvMsgSize <= 0 {
		cfg.MaxRecvMsgSize = 64 << 10
	}
	if cfg.MaxConcurrentStreams == 0 {
		cfg.MaxConcurrentStreams = 8
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{cfg: cfg, log: log, conns: map[*conn]struct{}{}}
	if cfg.TLS != nil {
		s.tls = cfg.TLS.Clone()
		s.tls.NextProtos = []string{"h2"}
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.fallback = newFallbackListener()
	return s, nil
}

// Fallback is the listener of the connections whose first request is not
// Config.Method, for grpc-go's Serve; with TLS, give grpc-go Creds too.
func (s *Server) Fallback() net.Listener { return s.fallback }

// Serve accepts connections on lis until it fails or Close; the
// connections' handshakes and routing run on goroutines of their own.
func (s *Server) Serve(lis net.Listener) error {
	s.fallback.setAddr(lis.Addr())
	stop := context.AfterFunc(s.ctx, func() { lis.Close() })
	defer stop()
	var delay time.Duration
	for {
		raw, err := lis.Accept()
		if err != nil {
			if s.ctx.Err() != nil {
				return nil
			}
			if !acceptRetry(err) {
				return err
			}
			// Out of file descriptors or memory, as grpc-go's Serve: wait
			// 5 ms, doubling to 1 s, for connections to close.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			s.log.Warn("accept failed; retrying", "err", err, "delay", delay)
			select {
			case <-time.After(delay):
			case <-s.ctx.Done():
				return nil
			}
			continue
		}
		delay = 0
		if !s.goConn(func() { s.route(raw) }) {
			raw.Close()
		}
	}
}

// acceptRetry reports whether Accept's err passes: a timeout, or a
// resource that connections closing give back. Failing Serve on it would
// end the control plane for a burst of connections.
func acceptRetry(err error) bool {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return true
	}
	for _, e := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM, syscall.ECONNABORTED} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// goConn runs f on a goroutine the server waits for; false once closed.
func (s *Server) goConn(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.wg.Add(1)
	go func() { defer s.wg.Done(); f() }()
	return true
}

// Close sends GOAWAY on every connection, closes them and the fallback
// listener, and waits for the connections' goroutines. It does not close
// the listener given to Serve (its owner does) but stops Serve.
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.cancel()
	for _, c := range conns {
		c.goAway(errServerClosed)
	}
	s.fallback.Close()
	s.wg.Wait()
	s.mu.Lock()
	p := s.poll
	s.mu.Unlock()
	if p != nil {
		p.stop()
	}
}

// getPoller is the server's poller, made on first use; nil where
// sockets cannot be polled, or once the server closed.
func (s *Server) getPoller() *poller {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.poll == nil && !s.noPoll && !s.closed {
		p, err := newPoller()
		if err != nil {
			s.noPoll = true
			s.log.Warn("cannot poll sockets; every connection keeps a reader", "err", err)
			return nil
		}
		s.poll = p
	}
	return s.poll
}

var errServerClosed = errors.New("server closed")

func (s *Server) track(c *conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	s.wg.Add(1)
	return true
}

func (s *Server) untrack(c *conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
	s.wg.Done()
}
