// Package grpcstream is a client of one bidirectional gRPC stream over the
// standard library's HTTP/2 (net/http), for a process that needs one
// streaming call and not a gRPC library: the agent's control plane stream
// costs it net/http's pages, which it maps anyway for its admin server,
// instead of grpc-go's and the protobuf runtime's.
//
// It speaks the gRPC-over-HTTP/2 protocol (PROTOCOL-HTTP2 in the gRPC
// repository): a POST to /<service>/<method> with content-type
// application/grpc and te: trailers, messages framed as a 1-byte
// compressed flag (always 0 here) and a 4-byte big-endian length, and the
// call's status in the grpc-status and grpc-message trailers (or in the
// headers of a trailers-only response). Messages are []byte: the caller
// marshals them. A received message is handed over as a reader of exactly
// its length, straight off the response body, so a message of megabytes
// is never held whole by the transport.
package grpcstream

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync"
	"time"
)

// Config configures a Client. Zero fields take the default named beside them.
type Config struct {
	// Addr is the server's host:port. Required.
	Addr string
	// TLS, when set, secures the connection (HTTP/2 negotiated by ALPN;
	// NextProtos is set to h2 on a copy); nil speaks unencrypted HTTP/2
	// with prior knowledge (h2c), as gRPC's plaintext does. ServerName
	// defaults to the host of Addr.
	TLS *tls.Config
	// ConnectTimeout bounds Open: the TCP connect, the TLS handshake and
	// writing the call's headers; 5s. A refused connection fails at once.
	ConnectTimeout time.Duration
	// KeepaliveTime is how long the connection may receive nothing before
	// the client sends an HTTP/2 PING; KeepaliveTimeout is how long it
	// then waits for the PING's ack before closing the connection (which
	// fails the stream). 0 for KeepaliveTime sends no pings; the timeout
	// defaults to 15s. A gRPC server must permit pings this often
	// (grpc-go's keepalive.EnforcementPolicy) or it closes the connection.
	KeepaliveTime    time.Duration
	KeepaliveTimeout time.Duration
	// StreamWindow and ConnWindow are the HTTP/2 receive windows of the
	// stream and of the connection: how much the server may send ahead of
	// what the caller has read, and so how much the transport buffers at
	// most. Both 1 MiB; the connection's is at least 64 KiB.
	StreamWindow int
	ConnWindow   int
	// MaxMessageSize bounds one received message; 4 MiB (gRPC's default).
	// A larger one fails the stream with ResourceExhausted.
	MaxMessageSize int
	// UserAgent is sent as the user-agent header; "grpcstream".
	UserAgent string
}

// Client holds the connection of one server's calls. Create it with New,
// open calls with Open, and Close it when done: Close closes the
// connection, and with it every call still open.
type Client struct {
	cfg       Config
	transport *http.Transport
	scheme    string

	mu     sync.Mutex // guards following
	conns  map[*trackedConn]struct{}
	closed bool
}

// New checks cfg and returns a Client; it does no I/O.
func New(cfg Config) (*Client, error) {
	if cfg.Addr == "" {
		return nil, errors.New("grpcstream: no address")
	}
	if _, _, err := net.SplitHostPort(cfg.Addr); err != nil {
		return nil, fmt.Errorf("grpcstream: address %q: %w", cfg.Addr, err)
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = 5 * time.Second
	}
	if cfg.KeepaliveTimeout <= 0 {
		cfg.KeepaliveTimeout = 15 * time.Second
	}
	def(&cfg.StreamWindow, 1<<20)
	def(&cfg.ConnWindow, 1<<20)
	cfg.ConnWindow = max(cfg.ConnWindow, 64<<10) // HTTP/2's initial window
	def(&cfg.MaxMessageSize, 4<<20)
	if cfg.UserAgent == "" {
		cfg.UserAgent = "grpcstream"
	}
	c := &Client{cfg: cfg, conns: map[*trackedConn]struct{}{}, scheme: "http"}
	var protos http.Protocols
	t := &http.Transport{
		DialContext:         c.dial,
		TLSHandshakeTimeout: cfg.ConnectTimeout,
		// A gRPC server never compresses the HTTP body (messages carry
		// their own flag), and net/http must not ask for gzip.
		DisableCompression: true,
		// The stream is the connection's only user: an idle connection
		// is one whose call ended, and the next call starts anew.
		IdleConnTimeout: time.Second,
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerStream:     cfg.StreamWindow,
			MaxReceiveBufferPerConnection: cfg.ConnWindow,
			SendPingTimeout:               cfg.KeepaliveTime,
			PingTimeout:                   cfg.KeepaliveTimeout,
		},
		Protocols: &protos,
	}
	if cfg.TLS != nil {
		tc := cfg.TLS.Clone()
		tc.NextProtos = []string{"h2"}
		t.TLSClientConfig = tc
		protos.SetHTTP2(true)
		c.scheme = "https"
	} else {
		protos.SetUnencryptedHTTP2(true)
	}
	c.transport = t
	return c, nil
}

// dial connects to the server and tracks the connection, so Close can end
// it whatever state net/http's pool has it in.
func (c *Client) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: c.cfg.ConnectTimeout}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	// The server must say something (its TLS handshake, or the HTTP/2
	// SETTINGS every server sends first) within ConnectTimeout. A hung
	// server's kernel still accepts connections into its backlog: without
	// this, an h2c call to it would wait for the keepalive to fail, not
	// move on to the next address.
	if err := conn.SetReadDeadline(time.Now().Add(c.cfg.ConnectTimeout)); err != nil {
		conn.Close()
		return nil, err
	}
	tc := &trackedConn{Conn: conn, c: c}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		conn.Close()
		return nil, errClientClosed
	}
	c.conns[tc] = struct{}{}
	return tc, nil
}

// Close closes the client's connection, failing any call still open. It
// is idempotent.
func (c *Client) Close() error {
	c.mu.Lock()
	c.closed = true
	conns := c.conns
	c.conns = map[*trackedConn]struct{}{}
	c.mu.Unlock()
	for tc := range conns {
		tc.Conn.Close()
	}
	c.transport.CloseIdleConnections()
	return nil
}

var errClientClosed = errors.New("client closed")

// trackedConn is a connection that leaves the client's set when closed,
// and lifts the first read's deadline once the server has spoken.
type trackedConn struct {
	net.Conn
	c     *Client
	once  sync.Once
	heard bool // read by one goroutine at a time: the handshake, then net/http's reader
}

func (t *trackedConn) Read(b []byte) (int, error) {
	n, err := t.Conn.Read(b)
	if n > 0 && !t.heard {
		t.heard = true
		if derr := t.Conn.SetReadDeadline(time.Time{}); derr != nil && err == nil {
			err = derr
		}
	}
	return n, err
}

func (t *trackedConn) Close() error {
	t.once.Do(func() {
		t.c.mu.Lock()
		delete(t.c.conns, t)
		t.c.mu.Unlock()
	})
	return t.Conn.Close()
}

// Open starts the call of method ("/package.Service/Method") with md as
// extra request headers (metadata: lowercase names, such as
// "authorization"), and returns once the call's headers were written to
// the server, or fails within ConnectTimeout. The call lives until ctx
// ends, Stream.Close, or the server ends it.
func (c *Client) Open(ctx context.Context, method string, md http.Header) (*Stream, error) {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return nil, &Error{Code: Canceled, Message: errClientClosed.Error(), err: errClientClosed}
	}
	sctx, cancel := context.WithCancel(ctx)
	wrote := make(chan struct{})
	var once sync.Once
	sctx = httptrace.WithClientTrace(sctx, &httptrace.ClientTrace{
		WroteHeaders: func() { once.Do(func() { close(wrote) }) },
	})
	pr, pw := io.Pipe()
	// net/http reads the request body without watching the context: a
	// body read waiting for the next Send would keep a cancelled call
	// open, so the context's end closes the body.
	context.AfterFunc(sctx, func() { pw.CloseWithError(context.Cause(sctx)) })
	req := &http.Request{
		Method:        http.MethodPost,
		URL:           &url.URL{Scheme: c.scheme, Host: c.cfg.Addr, Path: method},
		Host:          c.cfg.Addr,
		Header:        make(http.Header, len(md)+3),
		Body:          pr,
		ContentLength: -1, // streamed: no content-length
	}
	for k, v := range md {
		req.Header[http.CanonicalHeaderKey(k)] = v
	}
	req.Header.Set("Content-Type", "application/grpc")
	req.Header.Set("Te", "trailers")
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	req = req.WithContext(sctx)

	s := &Stream{
		ctx:     sctx,
		cancel:  cancel,
		pw:      pw,
		resDone: make(chan struct{}),
		max:     c.cfg.MaxMessageSize,
	}
	go func() {
		defer close(s.resDone)
		s.res, s.resErr = c.transport.RoundTrip(req)
	}()
	t := time.NewTimer(c.cfg.ConnectTimeout)
	defer t.Stop()
	select {
	case <-wrote:
		return s, nil
	case <-s.resDone:
		if s.resErr == nil {
			return s, nil // the server answered before the trace said so
		}
		err := s.transportError(s.resErr)
		s.Close()
		return nil, err
	case <-t.C:
		s.Close()
		return nil, &Error{Code: Unavailable, Message: fmt.Sprintf("no connection within %v", c.cfg.ConnectTimeout)}
	case <-ctx.Done():
		s.Close()
		return nil, ctxError(ctx.Err())
	}
}
