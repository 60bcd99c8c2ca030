package agentstream

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// routeBufSize is the buffer of a connection's reads until it is routed.
const routeBufSize = 1 << 10

// maxRouteBytes bounds what a client may send before its first request's
// headers: a preface, a few SETTINGS, WINDOW_UPDATE and PING frames and a
// header block of at most 16 KiB take far less. Everything read then is
// kept for a hand-off to grpc-go, so without the bound a client sending
// frames but no request would grow it until the deadline.
const maxRouteBytes = 64 << 10

var errRouteTooLong = errors.New("agentstream: too many bytes before the first request")

// recorder keeps what is read through it while the connection is routed,
// so a connection handed to grpc-go can be replayed from its first byte.
type recorder struct {
	r   io.Reader
	buf []byte
	on  bool
}

func (r *recorder) Read(b []byte) (int, error) {
	if r.on && len(r.buf) >= maxRouteBytes {
		return 0, errRouteTooLong
	}
	n, err := r.r.Read(b)
	if r.on {
		r.buf = append(r.buf, b[:n]...)
	}
	return n, err
}

// route handshakes, reads the preface and the client's frames up to its
// first request's headers, and serves the connection or hands it to
// grpc-go. Nothing but the server's SETTINGS is written before the route
// is known: grpc-go writes its own once it has the connection.
func (s *Server) route(raw net.Conn) {
	_ = raw.SetDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	nb := newNBConn(raw)
	c := &conn{s: s, raw: raw, nb: nb, rw: nb}
	if s.tls != nil {
		tc := tls.Server(nb, s.tls)
		if err := tc.HandshakeContext(s.ctx); err != nil {
			raw.Close()
			return
		}
		st := tc.ConnectionState()
		if st.NegotiatedProtocol != "h2" {
			raw.Close()
			return
		}
		c.rw, c.tlsState = tc, &st
	}
	rec := &recorder{r: c.rw, on: true}
	br := bufio.NewReaderSize(rec, routeBufSize)
	if !readPreface(br) {
		raw.Close()
		return
	}
	// HandshakeTimeout bounds the handshake and the preface, as
	// grpc-go's ConnectionTimeout. A client opens its stream when it is
	// ready: a busy one (an agent process reconnecting thousands of
	// streams at once) may take seconds more, and closing it then only
	// makes it start over. A silent connection is closed when the
	// keepalive would have closed it.
	_ = raw.SetDeadline(time.Now().Add(s.cfg.KeepaliveTime + s.cfg.KeepaliveTimeout))
	c.in.br = br
	c.fr = http2.NewFramer(c.rw, &c.in)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.fr.MaxHeaderListSize = 16 << 10
	// HTTP/2's default, which the server never raises: the reader gathers
	// a frame whole before the framer reads it (inbound.go).
	c.fr.SetMaxReadFrameSize(maxReadFrame)
	c.fr.SetReuseFrames()
	c.init()
	err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingMaxConcurrentStreams, Val: s.cfg.MaxConcurrentStreams})
	if err != nil {
		raw.Close()
		return
	}
	first, ok := c.readUntilHeaders()
	if !ok {
		raw.Close()
		return
	}
	if first.PseudoValue("path") != s.cfg.Method {
		s.handOff(c, rec.buf)
		return
	}
	rec.on, rec.buf = false, nil
	_ = raw.SetDeadline(time.Time{})
	// Its reader is this goroutine until serve starts one: a close
	// meanwhile (Server.Close) only marks it to read again.
	c.reading = true
	c.nb.onClose = c.wake
	if !s.track(c) {
		raw.Close()
		return
	}
	if !c.start(first) {
		c.close(errServerClosed)
		s.untrack(c)
		return
	}
	// The reader starts on a goroutine of its own, with a small stack:
	// this one grew for the handshake.
	c.serve()
}

func readPreface(r io.Reader) bool {
	var b [len(http2.ClientPreface)]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return false
	}
	return bytes.Equal(b[:], []byte(http2.ClientPreface))
}

// readUntilHeaders applies the client's frames up to its first headers
// (SETTINGS, WINDOW_UPDATE; PINGs are answered once routed) and returns
// those headers.
func (c *conn) readUntilHeaders() (*http2.MetaHeadersFrame, bool) {
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			return nil, false
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			return f, true
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if c.applySettings(f) != nil {
					return nil, false
				}
				c.settingsAcks++
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				c.connWindow += int64(f.Increment)
			}
		case *http2.PingFrame:
			if !f.IsAck() && len(c.earlyPings) < 4 {
				c.earlyPings = append(c.earlyPings, f.Data)
			}
		case *http2.DataFrame, *http2.RSTStreamFrame, *http2.GoAwayFrame:
			return nil, false // no stream yet
		}
	}
}
