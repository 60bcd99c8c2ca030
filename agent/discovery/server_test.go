package discovery

import (
	"crypto/tls"
	"net"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// scriptServer is a real NameDiscoveryService on 127.0.0.1:0 driven by the
// test: every request any stream receives goes to reqs, and responses put
// on send go to the stream that is open. It stands in for the control
// plane so these tests do not depend on its implementation.
type scriptServer struct {
	meshdnsv1.UnimplementedNameDiscoveryServiceServer
	addr    string
	srv     *grpc.Server
	reqs    chan *meshdnsv1.StreamNameTableRequest
	send    chan *meshdnsv1.StreamNameTableResponse
	streams chan struct{} // one value per stream opened

	mu   sync.Mutex
	drop chan struct{} // closed to end the open stream
}

func startScriptServer(t testing.TB, tlsCfg *tls.Config) *scriptServer {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	opts := []grpc.ServerOption{
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: time.Second, PermitWithoutStream: true}),
	}
	if tlsCfg != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	s := &scriptServer{
		addr:    lis.Addr().String(),
		srv:     grpc.NewServer(opts...),
		reqs:    make(chan *meshdnsv1.StreamNameTableRequest, 100),
		send:    make(chan *meshdnsv1.StreamNameTableResponse, 100),
		streams: make(chan struct{}, 100),
		drop:    make(chan struct{}),
	}
	meshdnsv1.RegisterNameDiscoveryServiceServer(s.srv, s)
	go s.srv.Serve(lis)
	t.Cleanup(s.srv.Stop)
	return s
}

func (s *scriptServer) StreamNameTable(st grpc.BidiStreamingServer[meshdnsv1.StreamNameTableRequest, meshdnsv1.StreamNameTableResponse]) error {
	s.mu.Lock()
	drop := s.drop
	s.mu.Unlock()
	s.streams <- struct{}{}
	errc := make(chan error, 1)
	go func() {
		for {
			r, err := st.Recv()
			if err != nil {
				errc <- err
				return
			}
			s.reqs <- r
		}
	}()
	for {
		select {
		case r := <-s.send:
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

// dropStream ends the open stream, as a control plane restart would.
func (s *scriptServer) dropStream() {
	s.mu.Lock()
	close(s.drop)
	s.drop = make(chan struct{})
	s.mu.Unlock()
}

func (s *scriptServer) recv(t testing.TB) *meshdnsv1.StreamNameTableRequest {
	t.Helper()
	select {
	case r := <-s.reqs:
		return r
	case <-time.After(10 * time.Second):
		t.Fatal("no request from the agent within 10s")
		return nil
	}
}

// noRecv asserts the agent sends nothing for d.
func (s *scriptServer) noRecv(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case r := <-s.reqs:
		t.Fatalf("unexpected request %v", r)
	case <-time.After(d):
	}
}

// startScriptServerAt listens on a given address (a reconnect target).
func startScriptServerAt(t testing.TB, addr string) *scriptServer {
	t.Helper()
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	s := &scriptServer{
		addr:    addr,
		srv:     grpc.NewServer(),
		reqs:    make(chan *meshdnsv1.StreamNameTableRequest, 100),
		send:    make(chan *meshdnsv1.StreamNameTableResponse, 100),
		streams: make(chan struct{}, 100),
		drop:    make(chan struct{}),
	}
	meshdnsv1.RegisterNameDiscoveryServiceServer(s.srv, s)
	go s.srv.Serve(lis)
	t.Cleanup(s.srv.Stop)
	return s
}
