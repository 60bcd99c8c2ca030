package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/controlplane/agentstream"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// agentOut is where a stream's responses go: agentstream's stream (the
// agents') or grpc-go's.
type agentOut interface {
	// sendMsg sends one response; it never waits for the agent.
	sendMsg(e *encoded) error
	// end ends the stream with err's status from outside its reader;
	// false when it cannot.
	end(err error) bool
}

// grpcOut is a stream served by grpc-go.
type grpcOut struct {
	st grpc.ServerStream
	ts grpc.ServerTransportStream
}

// statusWriter is the method of grpc-go's server transport stream (the
// ServerTransportStream in a handler's context) that ends a stream with a
// status, as the handler's return does. (A stream context of our own to
// cancel would cost every stream two contexts for these rare events;
// TestInventedNamespacesShareOneView fails if gRPC drops the method.)
type statusWriter interface {
	WriteStatus(*status.Status) error
}

func (g grpcOut) sendMsg(e *encoded) error { return g.st.SendMsg(e) }

func (g grpcOut) end(err error) bool {
	w, ok := g.ts.(statusWriter)
	if ok {
		_ = w.WriteStatus(status.Convert(err))
	}
	return ok
}

// leanOut is a stream served by agentstream: the fan-out worker frames
// and writes the response itself.
type leanOut struct{ st *agentstream.Stream }

func (l leanOut) sendMsg(e *encoded) error {
	var parts [6][]byte
	return l.st.Send(e.parts(&parts))
}

func (l leanOut) end(err error) bool {
	l.st.End(err)
	return true
}

// leanHandler serves StreamNameTable for agentstream.
type leanHandler struct{ s *Server }

func (h leanHandler) Open(ctx context.Context, st *agentstream.Stream, b []byte) (agentstream.Receiver, error) {
	s := h.s
	first := new(meshdnsv1.StreamNameTableRequest)
	if err := proto.Unmarshal(b, first); err != nil {
		s.m.streams.WithLabelValues("error").Inc()
		return nil, status.Errorf(codes.Internal, "decode request: %v", err)
	}
	a, done, err := s.open(ctx, first, leanOut{st: st})
	if err != nil {
		return nil, err
	}
	s.sendFirst(a)
	return &leanAgent{s: s, a: a, done: done}, nil
}

// leanAgent takes an agentstream stream's answers.
type leanAgent struct {
	s    *Server
	a    *agent
	done func()
	ans  answer // reused: an ACK decodes into it without allocating
}

func (l *leanAgent) Message(b []byte) error {
	if err := l.ans.decode(b); err != nil {
		return status.Errorf(codes.Internal, "grpc: failed to unmarshal the received message: %v", err)
	}
	l.s.answer(l.a, &l.ans)
	return nil
}

func (l *leanAgent) Closed(err error) error { return l.s.close(l.a, l.done, err) }
