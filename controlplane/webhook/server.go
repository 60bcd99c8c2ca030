package webhook

import (
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Bounds of the webhook's HTTPS server. The API server sends a review and
// waits at most its webhook timeout (timeoutSeconds, 30 s at most) for
// the answer, on connections it keeps alive; anything else that reaches
// the port gets no more than that either.
const (
	// MaxConnections bounds the open connections (and so the goroutines
	// serving them); more wait in the listen backlog. The API server needs
	// a few: HTTP/2 carries its reviews side by side.
	MaxConnections = 128
	// MaxStreams bounds the concurrent requests of one HTTP/2 connection
	// (Go's client, the API server's, opens another connection past it).
	MaxStreams = 4
	// What an HTTP/2 connection and one of its streams may have received
	// and not yet read: with the 128 KiB each request reads without a
	// slot, at most 1 MiB per connection, 128 MiB for all of them.
	receiveBufferPerConn   = 512 << 10
	receiveBufferPerStream = 128 << 10
	readHeaderTime         = 5 * time.Second
	readTime               = 15 * time.Second
	writeTime              = 15 * time.Second
	idleTime               = 2 * time.Minute
)

// NewServer returns the HTTPS server for h (the Webhook) with tlsConf and
// the timeouts above: a client that sends its headers or body slowly, or
// keeps an idle connection, is cut off. The server's own errors (failed
// handshakes: anything that reaches the port may fail one) go to log at
// Debug; nil discards them.
func NewServer(h http.Handler, tlsConf *tls.Config, log *slog.Logger) *http.Server {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	srv := &http.Server{
		Handler:           h,
		TLSConfig:         tlsConf,
		ReadHeaderTimeout: readHeaderTime,
		ReadTimeout:       readTime,
		WriteTimeout:      writeTime,
		IdleTimeout:       idleTime,
		MaxHeaderBytes:    16 << 10,
		HTTP2: &http.HTTP2Config{MaxConcurrentStreams: MaxStreams,
			MaxReceiveBufferPerConnection: receiveBufferPerConn, MaxReceiveBufferPerStream: receiveBufferPerStream},
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return srv
}

// LimitListener returns a listener that holds at most n connections open
// at once: Accept waits for one to close. Close unblocks a waiting Accept.
func LimitListener(l net.Listener, n int) net.Listener {
	return &limitListener{Listener: l, slots: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	slots     chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.slots <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.slots
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.slots }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives back its slot once, at its first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}
