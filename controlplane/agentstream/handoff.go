package agentstream

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"

	"google.golang.org/grpc/credentials"
)

// handOff gives c to grpc-go: what was read is replayed, the TLS
// handshake is done, and writes wait for the socket again.
func (s *Server) handOff(c *conn, read []byte) {
	c.nb.setBlocking()
	hc := &handedConn{Conn: c.rw, replay: read, state: c.tlsState}
	if !s.fallback.push(hc) {
		c.raw.Close()
	}
}

// handedConn is a connection handed to grpc-go.
type handedConn struct {
	net.Conn
	mu     sync.Mutex
	replay []byte
	state  *tls.ConnectionState // or nil: plaintext
}

func (h *handedConn) Read(b []byte) (int, error) {
	h.mu.Lock()
	if len(h.replay) > 0 {
		n := copy(b, h.replay)
		h.replay = h.replay[n:]
		h.mu.Unlock()
		return n, nil
	}
	h.mu.Unlock()
	return h.Conn.Read(b)
}

// fallbackListener yields the handed connections to grpc-go's Serve.
type fallbackListener struct {
	ch     chan net.Conn
	done   chan struct{}
	once   sync.Once
	mu     sync.Mutex
	addr   net.Addr
	closed bool
}

func newFallbackListener() *fallbackListener {
	return &fallbackListener{ch: make(chan net.Conn), done: make(chan struct{}),
		addr: &net.TCPAddr{IP: net.IPv4zero}}
}

func (l *fallbackListener) setAddr(a net.Addr) {
	l.mu.Lock()
	l.addr = a
	l.mu.Unlock()
}

func (l *fallbackListener) push(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *fallbackListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *fallbackListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *fallbackListener) Addr() net.Addr {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.addr
}

// Creds are grpc-go's transport credentials for the fallback listener of
// a TLS server: the handshake is done already, so they hand grpc-go the
// connection with its TLS state.
func Creds() credentials.TransportCredentials { return handedCreds{} }

type handedCreds struct{}

var errNotHanded = errors.New("agentstream: not a connection handed over by the server")

func (handedCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("agentstream: server credentials only")
}

func (handedCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	h, ok := c.(*handedConn)
	if !ok || h.state == nil {
		return nil, nil, errNotHanded
	}
	return h, tlsInfo(h.state), nil
}

func tlsInfo(st *tls.ConnectionState) credentials.TLSInfo {
	return credentials.TLSInfo{State: *st, CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity}}
}

func (handedCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls", SecurityVersion: "1.2"}
}

func (h handedCreds) Clone() credentials.TransportCredentials { return h }

func (handedCreds) OverrideServerName(string) error { return nil }
