package agentstream

import (
	"crypto/tls"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// conn is a routed connection: its reader (reader.go) is its only
// goroutine, and runs only while the socket has bytes; writes are made by
// whoever sends, under wmu.
type conn struct {
	s        *Server
	raw      net.Conn // the accepted connection
	nb       *nbConn  // raw with non-blocking writes
	rw       net.Conn // frames go through this: nb, or TLS over nb
	tlsState *tls.ConnectionState
	fr       *http2.Framer
	in       inbound // the framer reads from it
	poller   *poller // or nil: the reader blocks in Read
	// pollToken names the connection in its poller's epoll set; the
	// poller's.
	pollToken uint32

	pmu     sync.Mutex // guards following
	reading bool       // a reader runs (or the connection ended)
	again   bool       // woken while reading: read again before parking

	// The reader's, and the router's before it.
	settingsAcks int       // client SETTINGS to acknowledge once routed
	earlyPings   [][8]byte // client PINGs to answer once routed
	recvConn     int64     // connection bytes received, not yet credited back
	pingStrikes  int
	lastPing     time.Time

	lastStream atomic.Uint32 // the highest stream the client opened
	activity   atomic.Bool   // a frame was read since the keepalive looked
	sentData   atomic.Bool   // headers or data sent since the client's last ping
	ka         *time.Timer   // the keepalive (keepalive.go)
	kaPinged   bool          // its ping is out; the timer's callback's alone

	wmu        sync.Mutex // guards following, and every write to rw
	connWindow int64      // what the peer lets us send on the connection
	initWindow int64      // the peer's SETTINGS_INITIAL_WINDOW_SIZE
	maxFrame   int        // the peer's SETTINGS_MAX_FRAME_SIZE
	st         *Stream    // the open stream, or nil
	closed     bool
	closeErr   error
}

const (
	// initialWindow is HTTP/2's initial window, ours for the connection
	// and every stream (we never raise it: agents send small messages).
	initialWindow = 65535
	// creditAt is how many received bytes are credited back at once.
	creditAt = 16 << 10
)

func (c *conn) init() {
	c.connWindow, c.initWindow, c.maxFrame = initialWindow, initialWindow, 16384
}

// start answers what the router read, tells the client that the
// connection now serves one stream at a time, and opens the first
// stream.
func (c *conn) start(first *http2.MetaHeadersFrame) bool {
	c.wmu.Lock()
	var err error
	for ; c.settingsAcks > 0 && err == nil; c.settingsAcks-- {
		err = c.fr.WriteSettingsAck()
	}
	for _, p := range c.earlyPings {
		if err == nil {
			err = c.fr.WritePing(true, p)
		}
	}
	c.earlyPings = nil
	if err == nil {
		err = c.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: 1})
	}
	c.wmu.Unlock()
	if err != nil {
		return false
	}
	return c.onHeaders(first) == nil
}

var errGoAway = errors.New("the client sent GOAWAY")

func (c *conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.DataFrame:
		return c.onData(f)
	case *http2.MetaHeadersFrame:
		return c.onHeaders(f)
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		if err := c.applySettings(f); err != nil {
			c.goAwayCode(http2.ErrCodeFlowControl, err)
			return err
		}
		return c.write(func() error { return c.fr.WriteSettingsAck() })
	case *http2.PingFrame:
		return c.onPing(f)
	case *http2.WindowUpdateFrame:
		return c.onWindowUpdate(f)
	case *http2.RSTStreamFrame:
		if st := c.stream(f.StreamID); st != nil {
			c.wmu.Lock()
			st.ended, st.blocked = true, nil // a reset stream carries nothing more
			c.wmu.Unlock()
			c.finish(st, status.Error(codes.Canceled, "the client reset the stream"))
		}
	case *http2.GoAwayFrame:
		return errGoAway
	}
	return nil
}

// write runs f under wmu, unless the connection is closed.
func (c *conn) write(f func() error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.closed {
		return c.closeErr
	}
	return f()
}

// stream is the open stream when its ID is id, else nil.
func (c *conn) stream(id uint32) *Stream {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.st != nil && c.st.id == id {
		return c.st
	}
	return nil
}

func (c *conn) applySettings(f *http2.SettingsFrame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return f.ForeachSetting(func(s http2.Setting) error {
		switch s.ID {
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - c.initWindow
			c.initWindow = int64(s.Val)
			if c.st != nil {
				c.st.window += delta
				c.drainLocked(c.st)
			}
		case http2.SettingMaxFrameSize:
			c.maxFrame = int(s.Val)
		}
		return nil
	})
}

func (c *conn) onWindowUpdate(f *http2.WindowUpdateFrame) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	inc := int64(f.Increment)
	switch {
	case f.StreamID == 0:
		c.connWindow += inc
	case c.st != nil && c.st.id == f.StreamID:
		c.st.window += inc
	default:
		return nil
	}
	if c.connWindow > 1<<31-1 {
		return errors.New("flow control window overflow")
	}
	if c.st != nil {
		c.drainLocked(c.st)
	}
	return nil
}

func (c *conn) onData(f *http2.DataFrame) error {
	n := int64(f.Header().Length)
	c.recvConn += n
	if c.recvConn > initialWindow {
		err := errors.New("the client sent more than the connection's window")
		c.goAwayCode(http2.ErrCodeFlowControl, err)
		return err
	}
	if c.recvConn >= creditAt {
		credit := c.recvConn
		c.recvConn = 0
		if err := c.write(func() error { return c.fr.WriteWindowUpdate(0, uint32(credit)) }); err != nil {
			return err
		}
	}
	st := c.stream(f.StreamID)
	if st == nil {
		return nil // a stream that ended: its late data is dropped
	}
	st.recvWindow += n
	if st.recvWindow > initialWindow {
		c.endStream(st, status.Error(codes.Internal, "the client sent more than the stream's window"))
		return nil
	}
	if st.recvWindow >= creditAt && !f.StreamEnded() {
		credit := st.recvWindow
		st.recvWindow = 0
		if err := c.write(func() error { return c.fr.WriteWindowUpdate(st.id, uint32(credit)) }); err != nil {
			return err
		}
	}
	if err := st.msg.feed(f.Data(), st.deliver); err != nil {
		c.endStream(st, err)
		return nil
	}
	if f.StreamEnded() {
		c.wmu.Lock()
		st.clientDone = true
		c.wmu.Unlock()
		c.finish(st, io.EOF)
	}
	return nil
}

func (c *conn) resetStream(id uint32, code http2.ErrCode) {
	if st := c.stream(id); st != nil {
		c.wmu.Lock()
		st.ended, st.blocked = true, nil
		c.wmu.Unlock()
		c.finish(st, status.Error(codes.Internal, "stream error: "+code.String()))
	}
	_ = c.write(func() error { return c.fr.WriteRSTStream(id, code) })
}

// close closes the connection once; later writes fail with err.
func (c *conn) close(err error) {
	c.wmu.Lock()
	if c.closed {
		c.wmu.Unlock()
		return
	}
	c.closed, c.closeErr = true, err
	c.wmu.Unlock()
	c.nb.Close()
}

// goAway tells the client to go away (no error) and closes the
// connection.
func (c *conn) goAway(err error) { c.goAwayCode(http2.ErrCodeNo, err) }

func (c *conn) goAwayCode(code http2.ErrCode, err error) {
	_ = c.write(func() error { return c.fr.WriteGoAway(c.lastStream.Load(), code, []byte(err.Error())) })
	c.close(err)
}
