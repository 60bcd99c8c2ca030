package grpcstream

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strings"
	"sync"
)

// Stream is one open call. One goroutine may Send while another calls
// Recv; Send and Recv are each not safe for concurrent use.
type Stream struct {
	ctx    context.Context
	cancel context.CancelFunc
	pw     *io.PipeWriter // the request body
	max    int

	resDone chan struct{} // closed when res, resErr are set
	res     *http.Response
	resErr  error

	sendMu  sync.Mutex // guards sendBuf
	sendBuf []byte

	// Receive side, owned by the goroutine calling Recv.
	frames  *frameReader // nil until the response headers were checked
	recvErr error        // sticky: the call's end

	closeOnce sync.Once
}

// Send sends one message; it blocks until the transport has taken it
// (HTTP/2 flow control: the server reads what it was sent). After the
// call ended it returns an error; Recv then returns why it ended.
func (s *Stream) Send(msg []byte) error {
	if uint64(len(msg)) > math.MaxUint32 {
		return &Error{Code: ResourceExhausted, Message: fmt.Sprintf("message of %d bytes does not fit a gRPC frame", len(msg))}
	}
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	// One write, so a small message goes out as one DATA frame.
	s.sendBuf = appendFrame(s.sendBuf[:0], msg)
	if _, err := s.pw.Write(s.sendBuf); err != nil {
		return s.sendError(err)
	}
	if cap(s.sendBuf) > 64<<10 {
		s.sendBuf = nil // do not keep a large message's buffer
	}
	return nil
}

// sendError is the error of a Send after the call ended: the status of
// its headers when they carry one (a server that answered at once, such
// as one refusing the call), else Unavailable; the status that comes in
// trailers is Recv's to read.
func (s *Stream) sendError(err error) error {
	if cerr := s.ctx.Err(); cerr != nil {
		return ctxError(cerr)
	}
	// net/http closes the request body when the response ended, failed
	// or refused the call, and then RoundTrip returns (if it has not
	// already): its result is at most moments away.
	select {
	case <-s.resDone:
	case <-s.ctx.Done():
		return ctxError(s.ctx.Err())
	}
	if s.resErr == nil {
		var st *Error
		if errors.As(headerError(s.res), &st) {
			return st
		}
	}
	return &Error{Code: Unavailable, Message: "send: the call has ended", err: err}
}

// CloseSend tells the server that no more messages follow (half-close).
func (s *Stream) CloseSend() error {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	return s.pw.Close()
}

// Recv returns the next message as a reader of its size bytes, read
// straight off the connection: it is valid until the next Recv or Close,
// and what the caller leaves unread is skipped by the next Recv. At the
// end of the call Recv returns io.EOF when the server ended it with
// status OK, else an *Error carrying the gRPC status; it returns the same
// error from then on.
func (s *Stream) Recv() (io.Reader, int, error) {
	if s.recvErr != nil {
		return nil, 0, s.recvErr
	}
	if s.frames == nil {
		if err := s.start(); err != nil {
			return nil, 0, s.fail(err)
		}
	}
	size, err := s.frames.next()
	if err == nil {
		return (*message)(s), size, nil
	}
	return nil, 0, s.fail(s.recvError(err))
}

// message is the reader of the stream's current message: the frame
// reader's bytes, with its errors turned into the call's end.
type message Stream

func (m *message) Read(p []byte) (int, error) {
	s := (*Stream)(m)
	if s.recvErr != nil {
		return 0, s.recvErr
	}
	n, err := s.frames.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = s.fail(s.recvError(err))
	}
	return n, err
}

// start waits for the response headers and checks that the server
// answers the call. A trailers-only response (an error before any
// message) carries its status here.
func (s *Stream) start() error {
	select {
	case <-s.resDone:
	case <-s.ctx.Done():
		<-s.resDone // RoundTrip returns at once on a cancelled context
	}
	if s.resErr != nil {
		return s.transportError(s.resErr)
	}
	if err := headerError(s.res); err != nil {
		return err
	}
	s.frames = &frameReader{r: s.res.Body, max: s.max}
	return nil
}

// headerError reads the response headers: nil when they start a gRPC
// answer with messages to come, io.EOF for a trailers-only status OK, or
// the *Error of a trailers-only status or of a server that is not gRPC.
func headerError(res *http.Response) error {
	ct := res.Header.Get("Content-Type")
	isGRPC := ct == "application/grpc" || strings.HasPrefix(ct, "application/grpc+") || strings.HasPrefix(ct, "application/grpc;")
	if res.StatusCode != http.StatusOK {
		// Not a gRPC answer (a proxy's, or a server that is not gRPC):
		// the gRPC spec maps the HTTP status to a code.
		if st := headerStatus(res.Header); st != nil && isGRPC && st.Code != OK {
			return st
		}
		return &Error{Code: httpStatusCode(res.StatusCode), Message: fmt.Sprintf("unexpected HTTP status %q: not a gRPC server", res.Status)}
	}
	if !isGRPC {
		return &Error{Code: Unknown, Message: fmt.Sprintf("unexpected content-type %q: not a gRPC server", ct)}
	}
	if st := headerStatus(res.Header); st != nil {
		// Trailers-only: the status came with the headers.
		if st.Code == OK {
			return io.EOF
		}
		return st
	}
	return nil
}

// recvError turns a failed read of the response body into the call's end:
// the status in the trailers at the body's end, or the transport's error.
func (s *Stream) recvError(err error) error {
	var tooBig *sizeError
	switch {
	case errors.Is(err, io.EOF):
		// The body ended between messages: the trailers hold the status.
		st := headerStatus(s.res.Trailer)
		if st == nil {
			return &Error{Code: Internal, Message: "the server ended the call without a grpc-status"}
		}
		if st.Code == OK {
			return io.EOF
		}
		return st
	case errors.Is(err, errTruncated):
		// The body ended inside a message: a non-OK status explains why,
		// an OK one does not.
		if st := headerStatus(s.res.Trailer); st != nil && st.Code != OK {
			return st
		}
		return &Error{Code: Internal, Message: "the server ended the call inside a message"}
	case errors.As(err, &tooBig):
		return &Error{Code: ResourceExhausted, Message: tooBig.Error()}
	case errors.Is(err, errCompressed), errors.Is(err, errBadFrame):
		return &Error{Code: Internal, Message: err.Error()}
	}
	return s.transportError(err)
}

// fail records the call's end, and resets the stream (an error of ours
// must stop the server sending).
func (s *Stream) fail(err error) error {
	s.recvErr = err
	if !errors.Is(err, io.EOF) {
		s.cancel()
	}
	return err
}

// transportError is the error of a call the transport failed: cancelled
// by the caller, or the connection lost (Unavailable, so the caller tries
// again). The caller's error names the address; net's errors do too.
func (s *Stream) transportError(err error) error {
	if cerr := s.ctx.Err(); cerr != nil {
		return ctxError(cerr)
	}
	var st *Error
	if errors.As(err, &st) {
		return st
	}
	return &Error{Code: Unavailable, Message: err.Error(), err: err}
}

// ctxError is the status of a call whose context ended.
func ctxError(err error) error {
	code := Canceled
	if errors.Is(err, context.DeadlineExceeded) {
		code = DeadlineExceeded
	}
	return &Error{Code: code, Message: err.Error(), err: err}
}

// Close ends the call (resetting the stream if it is still open) and
// releases it. It is idempotent.
func (s *Stream) Close() error {
	s.closeOnce.Do(func() {
		s.pw.CloseWithError(errStreamClosed)
		s.cancel()
		<-s.resDone
		if s.res != nil {
			s.res.Body.Close()
		}
	})
	return nil
}

var errStreamClosed = errors.New("stream closed")

// sizeError is a message above the size limit.
type sizeError struct{ size, max int64 }

func (e *sizeError) Error() string {
	return fmt.Sprintf("received message of %d bytes, above the limit of %d", e.size, e.max)
}

// appendFrame appends msg with its gRPC frame header (uncompressed).
func appendFrame(b, msg []byte) []byte {
	b = append(b, 0, 0, 0, 0, 0)
	binary.BigEndian.PutUint32(b[len(b)-4:], uint32(len(msg)))
	return append(b, msg...)
}
