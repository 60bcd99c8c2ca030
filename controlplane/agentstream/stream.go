package agentstream

import (
	"context"
	"errors"
	"strings"
	"sync"

	"golang.org/x/net/http2"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Stream is one call of Config.Method.
type Stream struct {
	c   *conn
	id  uint32
	ctx context.Context

	rmu  sync.Mutex // held while the handler runs for the stream (Open, Message, Closed)
	recv Receiver   // nil until Open returned it
	done bool       // Closed was called, or Open failed

	// The reader's.
	msg        msgReader
	opening    bool  // the first message went to Open
	recvWindow int64 // bytes received on the stream, not yet credited back

	// Under c.wmu.
	window      int64 // what the peer lets us send on the stream
	headersSent bool
	ended       bool   // its status was sent, or it was reset: nothing more is written
	clientDone  bool   // the client closed its side
	blocked     []byte // message bytes waiting for the peer's window
}

var (
	errStreamEnded = errors.New("agentstream: the stream ended")
	errNoRequest   = status.Error(codes.Internal, "the stream ended before its first message")
)

// Context is the stream's context (the peer and the request's metadata);
// it ends when the server closes.
func (st *Stream) Context() context.Context { return st.ctx }

// onHeaders opens a stream, or refuses it with a status.
func (c *conn) onHeaders(f *http2.MetaHeadersFrame) error {
	if f.StreamID%2 == 0 || f.StreamID <= c.lastStream.Load() {
		err := errors.New("a stream ID not above the last one")
		c.goAwayCode(http2.ErrCodeProtocol, err)
		return err
	}
	c.lastStream.Store(f.StreamID)
	c.wmu.Lock()
	busy := c.st != nil
	c.wmu.Unlock()
	if busy {
		return c.write(func() error { return c.fr.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream) })
	}
	st := &Stream{c: c, id: f.StreamID}
	st.msg.max = c.s.cfg.MaxRecvMsgSize
	if err := c.check(f); err != nil {
		return c.refuse(st, err, f.StreamEnded())
	}
	if f.StreamEnded() {
		return c.refuse(st, errNoRequest, true)
	}
	p := &peer.Peer{Addr: c.raw.RemoteAddr(), LocalAddr: c.raw.LocalAddr()}
	if c.tlsState != nil {
		p.AuthInfo = tlsInfo(c.tlsState)
	}
	md := make(metadata.MD, len(f.Fields))
	for _, hf := range f.RegularFields() {
		md[hf.Name] = append(md[hf.Name], hf.Value)
	}
	st.ctx = metadata.NewIncomingContext(peer.NewContext(c.s.ctx, p), md)
	c.wmu.Lock()
	c.st, st.window = st, c.initWindow
	c.wmu.Unlock()
	return nil
}

// check refuses a request this server does not serve on the connection.
func (c *conn) check(f *http2.MetaHeadersFrame) error {
	switch {
	case f.PseudoValue("method") != "POST":
		return status.Error(codes.Internal, "method "+f.PseudoValue("method")+": gRPC needs POST")
	case !strings.HasPrefix(f.PseudoValue("path"), "/") || f.PseudoValue("path") != c.s.cfg.Method:
		return status.Errorf(codes.Unimplemented, "method %s is not served on this connection", f.PseudoValue("path"))
	}
	ct := ""
	enc := ""
	for _, hf := range f.RegularFields() {
		switch hf.Name {
		case "content-type":
			ct = hf.Value
		case "grpc-encoding":
			enc = hf.Value
		}
	}
	if ct != "application/grpc" && !strings.HasPrefix(ct, "application/grpc+") && !strings.HasPrefix(ct, "application/grpc;") {
		return status.Errorf(codes.Internal, "content-type %q is not gRPC's", ct)
	}
	if enc != "" && enc != "identity" {
		return status.Errorf(codes.Unimplemented, "grpc-encoding %q is not supported", enc)
	}
	if adm := c.s.cfg.Admit; adm != nil {
		if err := adm(c.raw.RemoteAddr()); err != nil {
			return err
		}
	}
	return nil
}

// refuse answers a stream that does not open with err's status.
func (c *conn) refuse(st *Stream, err error, clientDone bool) error {
	return c.write(func() error {
		st.clientDone = clientDone
		return c.writeStatusLocked(st, status.Convert(err))
	})
}

// deliver hands a whole message to the stream's handler: the first to
// Open on a goroutine of its own, the later ones to the Receiver.
func (st *Stream) deliver(b []byte) error {
	if !st.opening {
		st.opening = true
		first := append([]byte(nil), b...)
		st.rmu.Lock() // released by open, so later messages wait for it
		if !st.c.s.goConn(func() { st.open(first) }) {
			st.rmu.Unlock()
			return errServerClosed
		}
		return nil
	}
	st.rmu.Lock()
	defer st.rmu.Unlock()
	if st.done || st.recv == nil {
		return nil
	}
	return st.recv.Message(b)
}

func (st *Stream) open(first []byte) {
	recv, err := st.c.s.cfg.Handler.Open(st.ctx, st, first)
	if err != nil {
		st.done = true
		st.rmu.Unlock()
		st.c.endStream(st, err)
		return
	}
	st.recv = recv
	st.rmu.Unlock()
}

// End ends the stream with err's status, from outside its handler; the
// Receiver's Closed follows on a goroutine of its own.
func (st *Stream) End(err error) {
	c := st.c
	c.wmu.Lock()
	if st.ended || c.closed {
		c.wmu.Unlock()
		return
	}
	_ = c.writeStatusLocked(st, status.Convert(err))
	if c.st == st {
		c.st = nil // the client may open the next stream at once
	}
	c.wmu.Unlock()
	c.s.goConn(func() { c.finish(st, err) })
}

// finish calls the Receiver's Closed once, then ends the stream with the
// status it returns.
func (c *conn) finish(st *Stream, err error) {
	st.rmu.Lock()
	if st.done {
		st.rmu.Unlock()
		c.release(st)
		return
	}
	st.done = true
	final := err
	if st.recv != nil {
		final = st.recv.Closed(err)
	} else if err == nil {
		final = errNoRequest
	}
	st.rmu.Unlock()
	c.endStream(st, final)
}

// endStream sends err's status (nil is OK) if the stream can still carry
// one, and frees the connection for the next stream.
func (c *conn) endStream(st *Stream, err error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !st.ended && !c.closed {
		_ = c.writeStatusLocked(st, status.Convert(err))
	}
	st.ended, st.blocked = true, nil
	if c.st == st {
		c.st = nil
	}
}

func (c *conn) release(st *Stream) {
	c.wmu.Lock()
	if c.st == st && st.ended {
		c.st = nil
	}
	c.wmu.Unlock()
}

// writeStatusLocked sends the stream's trailers (trailers-only without
// headers sent) and resets it when the client has not closed its side,
// as grpc-go does.
func (c *conn) writeStatusLocked(st *Stream, s *status.Status) error {
	st.ended, st.blocked = true, nil
	block := trailers(!st.headersSent, s)
	err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: block, EndStream: true, EndHeaders: true})
	if err == nil && !st.clientDone {
		err = c.fr.WriteRSTStream(st.id, http2.ErrCodeNo)
	}
	return err
}
