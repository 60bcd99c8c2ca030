package agentstream

import (
	"errors"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A routed connection's reader runs only while its socket has bytes: the
// server's poller (poller_linux.go) wakes it, it reads and handles every
// whole frame until the socket has nothing more, and returns. Ten
// thousand idle agents so cost no goroutine stack and no read buffer.
// Where the socket cannot be polled, the reader blocks in Read instead
// and lives as long as the connection.

// serve starts reading the routed connection: the bytes the router read
// beyond the first request's headers first.
func (c *conn) serve() {
	c.in.endRouting()
	c.startKeepalive()
	if p := c.s.getPoller(); p != nil && p.add(c) == nil {
		c.poller = p
		c.nb.pollRead = true
	}
	go c.readBurst()
}

// wake starts the reader, or tells the running one to read again: the
// socket was closed (the reader then ends the connection). The poller
// wakes a connection whose socket got bytes likewise (poller.wake).
func (c *conn) wake() {
	if c.claim() {
		go c.readBurst()
	}
}

// claim reports whether the caller must start the reader: none runs. A
// running one reads again before it returns.
func (c *conn) claim() bool {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if c.reading {
		c.again = true
		return false
	}
	c.reading = true
	return true
}

// park ends a reader the socket has nothing more for; false when it was
// woken meanwhile and reads again.
func (c *conn) park() bool {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if c.again {
		c.again = false
		return false
	}
	c.reading = false
	return true
}

// readBurst reads and handles frames until the socket has nothing more,
// or the connection ends.
func (c *conn) readBurst() {
	for {
		c.nb.rearm()
		err := c.readAvailable()
		if errors.Is(err, errWouldBlock) {
			c.in.release()
			if c.park() {
				return
			}
			continue
		}
		c.end(err)
		return
	}
}

// readAvailable handles every whole frame read, reading more until the
// socket has nothing (errWouldBlock) or fails.
func (c *conn) readAvailable() error {
	for {
		need, err := frameNeed(c.in.unread())
		if err != nil {
			c.goAwayCode(http2.ErrCodeProtocol, err)
			return err
		}
		if need <= len(c.in.unread()) {
			if err := c.readFrame(); err != nil {
				return err
			}
			continue
		}
		n, err := c.rw.Read(c.in.space(need))
		c.in.w += n
		if n == 0 && err != nil {
			return err
		}
	}
}

// readFrame reads and handles the next frame, whole in c.in.
func (c *conn) readFrame() error {
	f, err := c.fr.ReadFrame()
	if err != nil {
		var se http2.StreamError
		if errors.As(err, &se) {
			c.resetStream(se.StreamID, se.Code)
			return nil
		}
		var ce http2.ConnectionError
		switch {
		case errors.As(err, &ce):
			c.goAwayCode(http2.ErrCode(ce), err)
		case errors.Is(err, http2.ErrFrameTooLarge):
			c.goAwayCode(http2.ErrCodeFrameSize, err)
		}
		return err
	}
	c.activity.Store(true)
	if err := c.handle(f); err != nil {
		return err
	}
	c.nb.waitBelow(maxBacklog)
	return nil
}

// end ends the connection and its stream, after its reader failed.
func (c *conn) end(err error) {
	c.close(err)
	c.stopKeepalive()
	if c.poller != nil {
		c.poller.remove(c)
	}
	c.in.release()
	c.wmu.Lock()
	st := c.st
	c.wmu.Unlock()
	if st != nil {
		c.finish(st, status.Error(codes.Unavailable, "connection lost: "+err.Error()))
	}
	c.s.untrack(c)
}
