package agentstream

import (
	"errors"
	"time"

	"golang.org/x/net/http2"
)

// The keepalive is a runtime timer per connection, not a goroutine: its
// callback runs only when it fires. After KeepaliveTime without a frame
// read it pings; after KeepaliveTimeout more without one it closes the
// connection (a node gone without a FIN).

var (
	errKeepalive = errors.New("keepalive: no answer to the ping")
	errPings     = errors.New("too_many_pings")
)

// keepalivePing is the data of the server's keepalive pings.
var keepalivePing = [8]byte{'m', 'e', 's', 'h', 'd', 'n', 's', 0}

func (c *conn) startKeepalive() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !c.closed {
		c.ka = time.AfterFunc(c.s.cfg.KeepaliveTime, c.keepalive)
	}
}

func (c *conn) stopKeepalive() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.ka != nil {
		c.ka.Stop()
	}
}

func (c *conn) keepalive() {
	if c.activity.Swap(false) {
		c.kaPinged = false
		c.resetKeepalive(c.s.cfg.KeepaliveTime)
		return
	}
	if c.kaPinged {
		c.close(errKeepalive)
		return
	}
	c.kaPinged = true
	if err := c.write(func() error { return c.fr.WritePing(false, keepalivePing) }); err != nil {
		return
	}
	c.resetKeepalive(c.s.cfg.KeepaliveTimeout)
}

func (c *conn) resetKeepalive(d time.Duration) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !c.closed {
		c.ka.Reset(d)
	}
}

// onPing answers a client's ping, and closes the connection of a client
// that pings more often than KeepaliveMinTime allows: three strikes, as
// grpc-go's enforcement policy (sending headers or data forgives them).
func (c *conn) onPing(f *http2.PingFrame) error {
	if f.IsAck() {
		return nil
	}
	now := time.Now()
	if c.sentData.Swap(false) {
		c.pingStrikes = 0
	}
	if !c.lastPing.IsZero() && now.Sub(c.lastPing) < c.s.cfg.KeepaliveMinTime {
		c.pingStrikes++
		if c.pingStrikes > 2 {
			c.goAwayCode(http2.ErrCodeEnhanceYourCalm, errPings)
			return errPings
		}
	}
	c.lastPing = now
	return c.write(func() error { return c.fr.WritePing(true, f.Data) })
}
