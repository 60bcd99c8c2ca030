// Package discoverytest provides a scripted NameDiscoveryService on
// loopback for tests of agents, in the spirit of net/http/httptest: a real
// gRPC server whose responses the test sends one by one and whose received
// requests the test reads, so agent tests do not depend on the control
// plane's implementation.
package discoverytest

import (
	"crypto/tls"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"

	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// Server is a scripted control plane. Every request any stream receives
// goes to Requests; responses given to Send go to the open stream.
type Server struct {
	meshdnsv1.UnimplementedNameDiscoveryServiceServer
	// Addr is the host:port the server listens on.
	Addr string
	// Requests receives every request of every stream, in order.
	Requests chan *meshdnsv1.StreamNameTableRequest
	// Streams receives one value each time a stream opens.
	Streams chan struct{}
	// Authorization receives the "authorization" metadata of each stream
	// ("" without one).
	Authorization chan string

	srv *grpc.Server

	mu sync.Mutex // guards following
	// cur is the response queue of the newest stream, or nil. Responses go
	// to the newest stream only: an older stream whose agent has gone may
	// not have noticed yet, and must not swallow them.
	cur chan *meshdnsv1.StreamNameTableResponse
	// pending holds responses sent while no stream is open.
	pending []*meshdnsv1.StreamNameTableResponse
	drop    chan struct{} // closed to end the open stream
}

// Start listens on addr ("127.0.0.1:0" for any port) with TLS when tlsCfg
// is set, and stops the server when the test ends.
func Start(t testing.TB, addr string, tlsCfg *tls.Config) *Server {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	opts := []grpc.ServerOption{
		// Agents ping every 30s by default; tests may ping faster.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
	}
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	s := &Server{
		Addr:          lis.Addr().String(),
		Requests:      make(chan *meshdnsv1.StreamNameTableRequest, 100),
		Streams:       make(chan struct{}, 100),
		Authorization: make(chan string, 100),
		srv:           grpc.NewServer(opts...),
		drop:          make(chan struct{}),
	}
	meshdnsv1.RegisterNameDiscoveryServiceServer(s.srv, s)
	go s.srv.Serve(lis)
	t.Cleanup(s.srv.Stop)
	return s
}

// StreamNameTable implements meshdnsv1.NameDiscoveryServiceServer.
func (s *Server) StreamNameTable(st grpc.BidiStreamingServer[meshdnsv1.StreamNameTableRequest, meshdnsv1.StreamNameTableResponse]) error {
	send := make(chan *meshdnsv1.StreamNameTableResponse, 100)
	s.mu.Lock()
	drop := s.drop
	for _, r := range s.pending {
		send <- r
	}
	s.pending, s.cur = nil, send
	s.mu.Unlock()
	defer s.retire(send)
	select {
	case s.Streams <- struct{}{}:
	default:
	}
	md, _ := metadata.FromIncomingContext(st.Context())
	select {
	case s.Authorization <- strings.Join(md.Get("authorization"), ","):
	default:
	}
	errc := make(chan error, 1)
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				errc <- err
				return
			}
			s.Requests <- r
		}
	}()
	for {
		select {
		case r := <-send:
			if err := st.Send(r); err != nil {
				return err
			}
		case err := <-errc:
			return err
		case <-drop:
			return nil
		}
	}
}

// retire detaches a stream's queue when the stream ends; responses it had
// not sent yet go to the next stream.
func (s *Server) retire(send chan *meshdnsv1.StreamNameTableResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != send {
		return // a newer stream took over; its queue is the live one
	}
	s.cur = nil
	s.takeLocked(send)
}

// takeLocked moves the responses queued in send to pending.
func (s *Server) takeLocked(send chan *meshdnsv1.StreamNameTableResponse) {
	for {
		select {
		case r := <-send:
			s.pending = append(s.pending, r)
		default:
			return
		}
	}
}

// Send queues a response for the newest open stream, or the next one.
func (s *Server) Send(r *meshdnsv1.StreamNameTableResponse) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur != nil {
		s.cur <- r
		return
	}
	s.pending = append(s.pending, r)
}

// DropStream ends the open stream, as a control plane restart would;
// responses sent afterwards go to the next stream.
func (s *Server) DropStream() {
	s.mu.Lock()
	close(s.drop)
	s.drop = make(chan struct{})
	if s.cur != nil {
		s.takeLocked(s.cur)
		s.cur = nil
	}
	s.mu.Unlock()
}

// Stop stops the server; agents see their stream fail.
func (s *Server) Stop() { s.srv.Stop() }

// Recv returns the next request, failing the test after 30s (generous:
// CI machines run many race-enabled tests at once).
func (s *Server) Recv(t testing.TB) *meshdnsv1.StreamNameTableRequest {
	t.Helper()
	select {
	case r := <-s.Requests:
		return r
	case <-time.After(Patience(t)):
		t.Fatal("no request from the agent before the test's deadline")
		return nil
	}
}

// NoRecv fails the test if a request arrives within d.
func (s *Server) NoRecv(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case r := <-s.Requests:
		t.Fatalf("unexpected request %v", r)
	case <-time.After(d):
	}
}

// Full returns a response replacing the whole table.
func Full(version, nonce string, t *meshdnsv1.NameTable) *meshdnsv1.StreamNameTableResponse {
	return &meshdnsv1.StreamNameTableResponse{VersionInfo: version, Nonce: nonce,
		Update: &meshdnsv1.StreamNameTableResponse_Full{Full: t}}
}

// Delta returns a response changing the table at base.
func Delta(version, nonce, base string, upserted map[string]*meshdnsv1.NameInfo, removed ...string) *meshdnsv1.StreamNameTableResponse {
	return &meshdnsv1.StreamNameTableResponse{VersionInfo: version, Nonce: nonce,
		Update: &meshdnsv1.StreamNameTableResponse_Delta{Delta: &meshdnsv1.NameTableDelta{
			BaseVersion: base, Upserted: upserted, Removed: removed,
		}}}
}

// Patience is how long a test waits for an event: until the test binary's
// own deadline (go test -timeout) but for a margin to report what it
// waited for, not a time sized for an idle machine.
func Patience(t testing.TB) time.Duration {
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if dl, ok := d.Deadline(); ok {
			return max(time.Until(dl)-10*time.Second, time.Second)
		}
	}
	return 10 * time.Minute
}
