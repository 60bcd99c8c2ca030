package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
)

// podTunnel reaches ports of one pod through the API server's portforward
// subresource, as kubectl port-forward does, but hands each connection to
// the caller as a net.Conn instead of listening on a local port. The
// kubelet connects to the port inside the pod's network namespace, so a
// port bound to the pod's 127.0.0.1 (the control plane's admin port) is
// reachable.
type podTunnel struct {
	conn   httpstream.Connection
	nextID atomic.Int64
}

// dialPod opens the tunnel: WebSockets first (API servers from 1.31), SPDY
// when the server refuses the upgrade, the order kubectl uses.
func dialPod(rc *rest.Config, namespace, pod string) (*podTunnel, error) {
	u, err := url.Parse(strings.TrimSuffix(rc.Host, "/") + rc.APIPath)
	if err != nil {
		return nil, fmt.Errorf("API server address %q: %w", rc.Host, err)
	}
	if u.Scheme == "" { // rest.Config allows a bare host:port
		u, err = url.Parse("https://" + strings.TrimSuffix(rc.Host, "/"))
		if err != nil {
			return nil, fmt.Errorf("API server address %q: %w", rc.Host, err)
		}
	}
	u.Path = strings.TrimSuffix(u.Path, "/") + "/api/v1/namespaces/" + namespace + "/pods/" + pod + "/portforward"
	transport, upgrader, err := spdy.RoundTripperFor(rc)
	if err != nil {
		return nil, fmt.Errorf("port-forward transport: %w", err)
	}
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, u)
	if ws, err := portforward.NewSPDYOverWebsocketDialer(u, rc); err == nil {
		dialer = portforward.NewFallbackDialer(ws, dialer, func(err error) bool {
			return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
		})
	}
	conn, proto, err := dialer.Dial(portforward.PortForwardProtocolV1Name)
	if err != nil {
		return nil, fmt.Errorf("port-forward to pod %s/%s: %w", namespace, pod, err)
	}
	if proto != portforward.PortForwardProtocolV1Name {
		conn.Close()
		return nil, fmt.Errorf("port-forward to pod %s/%s: the server speaks %q, not %q", namespace, pod, proto, portforward.PortForwardProtocolV1Name)
	}
	return &podTunnel{conn: conn}, nil
}

// Close ends the tunnel and every connection over it.
func (t *podTunnel) Close() error { return t.conn.Close() }

// dial opens one connection to port in the pod. What the kubelet reports
// when it cannot connect (nothing listens there) arrives on the request's
// error stream; a read or write then fails with that message.
func (t *podTunnel) dial(port int) (net.Conn, error) {
	id := strconv.FormatInt(t.nextID.Add(1), 10)
	h := http.Header{}
	h.Set(corev1.StreamType, corev1.StreamTypeError)
	h.Set(corev1.PortHeader, strconv.Itoa(port))
	h.Set(corev1.PortForwardRequestIDHeader, id)
	errStream, err := t.conn.CreateStream(h)
	if err != nil {
		return nil, fmt.Errorf("port-forward error stream: %w", err)
	}
	errStream.Close() // nothing to send on it
	h.Set(corev1.StreamType, corev1.StreamTypeData)
	data, err := t.conn.CreateStream(h)
	if err != nil {
		t.conn.RemoveStreams(errStream)
		return nil, fmt.Errorf("port-forward data stream: %w", err)
	}
	c := &tunnelConn{t: t, data: data, errStream: errStream, port: port, remoteErr: make(chan struct{})}
	go c.watchErrors()
	return c, nil
}

// tunnelConn is one forwarded connection as a net.Conn. Deadlines are not
// supported by the streams; callers bound their wait with a context, which
// closes the connection.
type tunnelConn struct {
	t         *podTunnel
	data      httpstream.Stream
	errStream httpstream.Stream
	port      int

	remoteErr chan struct{} // closed once the error stream ended
	mu        sync.Mutex    // guards err
	err       error         // what the kubelet reported, or nil
	closeOnce sync.Once
}

func (c *tunnelConn) watchErrors() {
	msg, err := io.ReadAll(c.errStream)
	c.mu.Lock()
	switch {
	case len(msg) > 0:
		c.err = fmt.Errorf("port %d in the pod: %s", c.port, strings.TrimSpace(string(msg)))
	case err != nil:
		c.err = fmt.Errorf("port %d in the pod: reading the error stream: %w", c.port, err)
	}
	failed := c.err != nil
	c.mu.Unlock()
	close(c.remoteErr)
	if failed { // wake a reader waiting for data that will never come
		_ = c.data.Reset()
	}
}

// remote returns what the kubelet reported, if anything, else err.
func (c *tunnelConn) remote(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return c.err
	}
	return err
}

func (c *tunnelConn) Read(p []byte) (int, error) {
	n, err := c.data.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = c.remote(err)
	} else if errors.Is(err, io.EOF) {
		// The data stream ends before the error stream says why: wait
		// for it (it ends right after), so a refused connection is told
		// apart from an empty answer.
		<-c.remoteErr
		if rerr := c.remote(nil); rerr != nil {
			err = rerr
		}
	}
	return n, err
}

func (c *tunnelConn) Write(p []byte) (int, error) {
	n, err := c.data.Write(p)
	if err != nil {
		err = c.remote(err)
	}
	return n, err
}

func (c *tunnelConn) Close() error {
	c.closeOnce.Do(func() {
		_ = c.data.Reset()
		c.t.conn.RemoveStreams(c.data, c.errStream)
	})
	return nil
}

func (c *tunnelConn) LocalAddr() net.Addr              { return tunnelAddr("local") }
func (c *tunnelConn) RemoteAddr() net.Addr             { return tunnelAddr("pod:" + strconv.Itoa(c.port)) }
func (c *tunnelConn) SetDeadline(time.Time) error      { return nil }
func (c *tunnelConn) SetReadDeadline(time.Time) error  { return nil }
func (c *tunnelConn) SetWriteDeadline(time.Time) error { return nil }

type tunnelAddr string

func (a tunnelAddr) Network() string { return "portforward" }
func (a tunnelAddr) String() string  { return string(a) }

// httpClient returns a client whose every connection is a new forwarded
// connection to port in the pod; the URL's host is ignored.
func (t *podTunnel) httpClient(port int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return t.dial(port)
		},
		// One request per connection: a stream is cheap, and a kept-alive
		// one would outlive the tunnel.
		DisableKeepAlives: true,
	}}
}
