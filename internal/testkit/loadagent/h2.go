package loadagent

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/meshdns/meshdns/internal/namewire"
)

// A stream is one StreamNameTable call on a connection of its own, spoken
// with HTTP/2 frames on the agent's goroutine. grpc-go's client hands
// every message from its reader goroutine to the caller and every send to
// its writer goroutine: thousands of agents on the control plane's two
// shared cores then cost more CPU per update than the control plane they
// measure. Here a response is read, answered and its ACK written where it
// was read. The frames the server sees are the ones grpc-go sent: the
// call's headers, one DATA frame per message, and window updates once a
// quarter of the static windows was read.
type stream struct {
	conn net.Conn
	br   *bufio.Reader
	fr   *http2.Framer
	// sendConn and sendStream are the server's windows for what we send;
	// pending is a message waiting for them to open.
	sendConn, sendStream int64
	initWindow           int64 // the server's SETTINGS_INITIAL_WINDOW_SIZE
	pending              []byte
	// unacked counts the bytes read since the last window update.
	unacked int
	// msg holds the message being read: its 5-byte prefix first.
	msg []byte
}

// streamID is the only stream of the connection.
const streamID = 1

// dial connects to addr (from source when valid), negotiates HTTP/2 (ALPN
// h2 under tls, prior knowledge without) and opens the call of method. The
// connection closes when ctx ends.
func dial(ctx context.Context, addr string, source netip.Addr, tlsConf *tls.Config, method string) (*stream, error) {
	d := net.Dialer{}
	if source.IsValid() {
		d.LocalAddr = net.TCPAddrFromAddrPort(netip.AddrPortFrom(source, 0))
	}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	scheme := "http"
	if tlsConf != nil {
		scheme = "https"
		c := tlsConf.Clone()
		c.NextProtos = []string{"h2"}
		if c.ServerName == "" {
			c.ServerName, _, _ = net.SplitHostPort(addr)
		}
		tc := tls.Client(conn, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		conn = tc
	}
	context.AfterFunc(ctx, func() { conn.Close() })
	s := &stream{conn: conn, br: bufio.NewReaderSize(conn, 4<<10), sendConn: 65535, sendStream: 65535, initWindow: 65535}
	s.fr = http2.NewFramer(conn, s.br)
	s.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	s.fr.MaxHeaderListSize = 64 << 10
	if err := s.open(addr, scheme, method); err != nil {
		conn.Close()
		return nil, err
	}
	return s, nil
}

func (s *stream) open(authority, scheme, method string) error {
	if _, err := io.WriteString(s.conn, http2.ClientPreface); err != nil {
		return err
	}
	if err := s.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: window}); err != nil {
		return err
	}
	if err := s.fr.WriteWindowUpdate(0, window-65535); err != nil {
		return err
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", scheme}, {":path", method}, {":authority", authority},
		{"content-type", "application/grpc"}, {"te", "trailers"}, {"user-agent", "meshdns-loadagent"},
	} {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			return err
		}
	}
	return s.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: streamID, BlockFragment: hb.Bytes(), EndHeaders: true})
}

// send writes req as one gRPC message, encoded as the agent encodes it,
// once the server's windows take it.
func (s *stream) send(req *namewire.Request) error {
	b := req.Append(make([]byte, 5, 128))
	binary.BigEndian.PutUint32(b[1:5], uint32(len(b)-5))
	s.pending = b
	return s.flush()
}

func (s *stream) flush() error {
	n := int64(len(s.pending))
	if s.pending == nil || n > s.sendConn || n > s.sendStream {
		return nil
	}
	s.sendConn -= n
	s.sendStream -= n
	b := s.pending
	s.pending = nil
	return s.fr.WriteData(streamID, false, b)
}

// recv returns the next message of the response; io.EOF when the call
// ended with status OK.
func (s *stream) recv() ([]byte, error) {
	for {
		if m, ok := s.message(); ok {
			return m, nil
		}
		f, err := s.fr.ReadFrame()
		if err != nil {
			return nil, err
		}
		if err := s.frame(f); err != nil {
			return nil, err
		}
	}
}

// message cuts a whole message off s.msg, if one is there.
func (s *stream) message() ([]byte, bool) {
	if len(s.msg) < 5 {
		return nil, false
	}
	n := int(binary.BigEndian.Uint32(s.msg[1:5]))
	if len(s.msg) < 5+n {
		return nil, false
	}
	m := s.msg[5 : 5+n]
	rest := s.msg[5+n:]
	if len(rest) == 0 {
		// The next message starts a buffer of its own: a full table's
		// is not kept by an idle agent.
		s.msg = nil
	} else {
		s.msg = append([]byte(nil), rest...)
	}
	return m, true
}

// take appends b to the message being read, its buffer sized once the
// prefix says how long the message is: a full table grown by appends
// would cost every agent twice its size in copies.
func (s *stream) take(b []byte) error {
	if len(s.msg) < 5 && len(s.msg)+len(b) >= 5 {
		head := append(s.msg[:len(s.msg):len(s.msg)], b[:5-len(s.msg)]...)
		n := int(binary.BigEndian.Uint32(head[1:5]))
		if n > maxMessage {
			return fmt.Errorf("a message of %d bytes: over the bound of %d", n, maxMessage)
		}
		s.msg = slices.Grow(s.msg, 5+n-len(s.msg))
	}
	s.msg = append(s.msg, b...)
	return nil
}

// maxMessage bounds a response: a full table of 100,000 names is ~6 MB.
const maxMessage = 64 << 20

func (s *stream) frame(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.DataFrame:
		if f.StreamID != streamID {
			return nil
		}
		if err := s.take(f.Data()); err != nil {
			return err
		}
		if err := s.credit(int(f.Length)); err != nil {
			return err
		}
		if f.StreamEnded() {
			return errors.New("stream ended without a status")
		}
	case *http2.MetaHeadersFrame:
		if f.StreamEnded() {
			return callStatus(f)
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
			s.sendStream += int64(v) - s.initWindow
			s.initWindow = int64(v)
		}
		if err := s.fr.WriteSettingsAck(); err != nil {
			return err
		}
		return s.flush()
	case *http2.WindowUpdateFrame:
		if f.StreamID == 0 {
			s.sendConn += int64(f.Increment)
		} else {
			s.sendStream += int64(f.Increment)
		}
		return s.flush()
	case *http2.PingFrame:
		if !f.IsAck() {
			return s.fr.WritePing(true, f.Data)
		}
	case *http2.RSTStreamFrame:
		return fmt.Errorf("stream reset: %v", f.ErrCode)
	case *http2.GoAwayFrame:
		return fmt.Errorf("goaway: %v %s", f.ErrCode, f.DebugData())
	}
	return nil
}

// credit counts n bytes read and gives them back to the server once a
// quarter of the window was read, as grpc-go's client does.
func (s *stream) credit(n int) error {
	s.unacked += n
	if s.unacked < window/4 {
		return nil
	}
	n, s.unacked = s.unacked, 0
	if err := s.fr.WriteWindowUpdate(0, uint32(n)); err != nil {
		return err
	}
	return s.fr.WriteWindowUpdate(streamID, uint32(n))
}

// callStatus is the call's end from its trailers (or a trailers-only
// response): io.EOF for status OK.
func callStatus(f *http2.MetaHeadersFrame) error {
	st, msg := "", ""
	for _, h := range f.RegularFields() {
		switch h.Name {
		case "grpc-status":
			st = h.Value
		case "grpc-message":
			msg = h.Value
		}
	}
	if st == "0" {
		return io.EOF
	}
	return fmt.Errorf("call ended with status %q: %s", st, msg)
}

func (s *stream) close() { s.conn.Close() }
