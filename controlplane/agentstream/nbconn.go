package agentstream

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// nbConn is a connection whose Write never waits for the peer: it writes
// what the socket takes at once (one non-blocking system call), keeps the
// rest, and a goroutine started for it flushes that in order. A fan-out
// worker writing to ten thousand connections must never wait on one slow
// or dead agent; the caller bounds what an agent may leave unread (the
// server's unanswered bounds), and maxPending closes a connection that
// still piles up more. Beneath TLS, it makes tls.Conn's writes
// non-blocking too.
type nbConn struct {
	net.Conn
	raw syscall.RawConn // or nil: every write goes through the flusher

	mu       sync.Mutex // guards following
	pending  []byte     // written by the caller, not yet by the socket
	flushing bool       // the flusher runs
	blocking bool       // handed to grpc-go: writes wait as usual
	err      error      // the first write error; every later write fails
	inflight int        // bytes the flusher is writing
	waiters  int        // readers waiting in waitBelow
	drained  sync.Cond  // on mu: the flusher wrote, or ended

	// tryWrite's state, so the function given to raw.Control is made once
	// (a closure per write would be an allocation per write).
	wb      []byte
	wn      int
	werr    error
	writeFn func(fd uintptr)

	// The reader's, once polled (reader.go): Read never waits, and
	// fails with errWouldBlock when the socket has nothing.
	pollRead bool
	dry      bool        // the last read emptied the socket
	hangup   atomic.Bool // the poller saw the peer close or fail: no short read means empty
	rb       []byte
	rn       int
	rerr     error
	readFn   func(fd uintptr)
	// onClose is called when Close closes the connection (the reader
	// then ends it); set before the connection is shared.
	onClose func()
}

const (
	// maxPending bounds what a connection's peer may leave unread.
	maxPending = 16 << 20
	// flushTimeout bounds one flush of the pending bytes.
	flushTimeout = 30 * time.Second
)

var errTooSlow = errors.New("agentstream: the peer reads too slowly")

func newNBConn(c net.Conn) *nbConn {
	nb := &nbConn{Conn: c}
	nb.drained.L = &nb.mu
	if sc, ok := c.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			nb.raw = raw
			nb.writeFn, nb.readFn = nb.writeFd, nb.readFd
		}
	}
	return nb
}

// setBlocking makes later writes wait for the socket (net.Conn's usual
// contract); for a connection handed to grpc-go.
func (c *nbConn) setBlocking() {
	c.mu.Lock()
	c.blocking = true
	c.mu.Unlock()
}

func (c *nbConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	if c.blocking && !c.flushing && len(c.pending) == 0 {
		c.mu.Unlock()
		return c.Conn.Write(b)
	}
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	n := len(b)
	// Not while the flusher writes, even with nothing pending: its bytes
	// go first.
	if !c.flushing && c.raw != nil {
		w, err := c.tryWrite(b)
		if err != nil {
			c.err = err
			return w, err
		}
		b = b[w:]
		if len(b) == 0 {
			return n, nil
		}
	}
	if len(c.pending)+len(b) > maxPending {
		c.err = errTooSlow
		c.Close()
		return 0, c.err
	}
	c.pending = append(c.pending, b...)
	if !c.flushing {
		c.flushing = true
		go c.flush()
	}
	return n, nil
}

// Close closes the connection and tells its reader.
func (c *nbConn) Close() error {
	err := c.Conn.Close()
	if c.onClose != nil {
		c.onClose()
	}
	return err
}

// errWouldBlock is a polled read's when the socket has nothing: a
// temporary net.Error, so that TLS keeps what it read of a record.
var errWouldBlock error = wouldBlockError{}

type wouldBlockError struct{}

func (wouldBlockError) Error() string   { return "agentstream: the socket has nothing to read" }
func (wouldBlockError) Timeout() bool   { return true }
func (wouldBlockError) Temporary() bool { return true }

func (c *nbConn) Read(b []byte) (int, error) {
	if !c.pollRead {
		return c.Conn.Read(b)
	}
	if c.dry || len(b) == 0 {
		return 0, errWouldBlock
	}
	c.rb, c.rn, c.rerr = b, 0, nil
	err := c.raw.Control(c.readFn)
	if err == nil {
		err = c.rerr
	}
	n := c.rn
	c.rb = nil
	return n, err
}

// readFd reads once without waiting (under raw.Control, which only holds
// the descriptor open: raw.Read would also prepare the runtime's poller
// for a wait that never comes). A read shorter than asked for emptied the
// socket: the next bytes wake the reader again (the poller is
// edge-triggered), so it need not ask again to hear EAGAIN; but for a
// peer's FIN that came with the bytes (hangup), which no later edge
// announces.
func (c *nbConn) readFd(fd uintptr) {
	for {
		n, err := syscall.Read(int(fd), c.rb)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			c.dry, c.rerr = true, errWouldBlock
		case err != nil:
			c.rerr = err
		case n == 0:
			c.rerr = io.EOF
		default:
			c.rn, c.dry = n, n < len(c.rb) && !c.hangup.Load()
		}
		return
	}
}

// rearm lets the reader read the socket again, once woken.
func (c *nbConn) rearm() { c.dry = false }

// tryWrite writes what the socket takes without waiting; c.mu is held.
func (c *nbConn) tryWrite(b []byte) (int, error) {
	c.wb, c.wn, c.werr = b, 0, nil
	err := c.raw.Control(c.writeFn)
	if err == nil {
		err = c.werr
	}
	n := c.wn
	c.wb = nil
	return n, err
}

// writeFd writes c.wb to fd until the socket would block. It runs under
// raw.Control, which only holds the descriptor open: it never waits, and
// the flusher (which does) is not running (Write's caller checks).
func (c *nbConn) writeFd(fd uintptr) {
	for c.wn < len(c.wb) {
		n, err := syscall.Write(int(fd), c.wb[c.wn:])
		if n > 0 {
			c.wn += n
		}
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			return
		case err != nil:
			c.werr = err
			return
		case n == 0:
			return
		}
	}
}

// flush writes the pending bytes, waiting for the socket, until none are
// left.
func (c *nbConn) flush() {
	var spare []byte
	for {
		c.mu.Lock()
		c.inflight = 0
		if c.waiters > 0 {
			c.drained.Broadcast()
		}
		if len(c.pending) == 0 || c.err != nil {
			c.flushing = false
			c.pending = nil // an idle connection keeps no buffer
			c.mu.Unlock()
			return
		}
		buf := c.pending
		c.pending, c.inflight = spare[:0], len(buf)
		c.mu.Unlock()
		_ = c.Conn.SetWriteDeadline(time.Now().Add(flushTimeout))
		_, err := c.Conn.Write(buf)
		if err != nil {
			c.mu.Lock()
			c.err = err
			c.mu.Unlock()
			c.Close()
			continue
		}
		spare = buf
	}
}

// maxBacklog is how much may wait to be written before the connection's
// reader stops reading. Every frame a client sends may make the reader
// write one (SETTINGS and PING acknowledgements, RST_STREAM): a client
// that sends them without reading would pile the answers up to
// maxPending. grpc-go's reader stops likewise when its writer's queue is
// long.
const maxBacklog = 64 << 10

// waitBelow waits until at most limit bytes wait to be written, or the
// connection failed; for the reader, between frames.
func (c *nbConn) waitBelow(limit int) {
	c.mu.Lock()
	for c.flushing && c.err == nil && len(c.pending)+c.inflight > limit {
		c.waiters++
		c.drained.Wait()
		c.waiters--
	}
	c.mu.Unlock()
}
