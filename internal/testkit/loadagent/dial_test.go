package loadagent

import (
	"context"
	"crypto/tls"
	"net"
	"net/netip"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/meshdns/meshdns/internal/testkit/certtest"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// seen is what the test server learned of one stream.
type seen struct {
	from netip.Addr
	cn   string // the client certificate's common name, "" without one
	ack  string // the version of the agent's ACK
}

// peerServer answers every stream with one delta and reports who it was.
type peerServer struct {
	meshdnsv1.UnimplementedNameDiscoveryServiceServer
	streams chan seen
}

func (s *peerServer) StreamNameTable(st meshdnsv1.NameDiscoveryService_StreamNameTableServer) error {
	if _, err := st.Recv(); err != nil {
		return err
	}
	var got seen
	p, _ := peer.FromContext(st.Context())
	got.from = p.Addr.(*net.TCPAddr).AddrPort().Addr()
	if ti, ok := p.AuthInfo.(credentials.TLSInfo); ok && len(ti.State.PeerCertificates) > 0 {
		got.cn = ti.State.PeerCertificates[0].Subject.CommonName
	}
	if err := st.Send(&meshdnsv1.StreamNameTableResponse{VersionInfo: "v1", Nonce: "n1",
		Update: &meshdnsv1.StreamNameTableResponse_Delta{Delta: &meshdnsv1.NameTableDelta{BaseVersion: "v0"}}}); err != nil {
		return err
	}
	ack, err := st.Recv()
	if err != nil {
		return err
	}
	got.ack = ack.GetVersionInfo()
	s.streams <- got
	<-st.Context().Done()
	return nil
}

// serve runs a server on loopback (mTLS with conf when set) and returns
// its address.
func serve(t *testing.T, conf *tls.Config) (string, chan seen) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var opts []grpc.ServerOption
	if conf != nil {
		opts = append(opts, grpc.Creds(credentials.NewTLS(conf)))
	}
	srv := grpc.NewServer(opts...)
	ps := &peerServer{streams: make(chan seen, 4)}
	meshdnsv1.RegisterNameDiscoveryServiceServer(srv, ps)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	return lis.Addr().String(), ps.streams
}

// runAgent runs cfg until the test ends and returns its first event.
func runAgent(t *testing.T, cfg Config) Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	events := make(chan Event, 4)
	cfg.Report = func(e Event) { events <- e }
	done := make(chan struct{})
	go func() { defer close(done); _ = Run(ctx, cfg) }()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case e := <-events:
		return e
	case <-time.After(time.Minute):
		t.Fatal("no response applied within a minute")
		return Event{}
	}
}

// TestSource: an agent with a Source connects from that loopback address,
// so a control plane sees agents of distinct pods as distinct peers; one
// without comes from the kernel's choice (127.0.0.1).
func TestSource(t *testing.T) {
	addr, streams := serve(t, nil)
	for _, src := range []netip.Addr{SourceAddr(0), SourceAddr(9999), {}} {
		runAgent(t, Config{Addrs: []string{addr}, Namespace: "ns", Pod: "p", Source: src})
		got := <-streams
		want := src
		if !want.IsValid() {
			want = netip.MustParseAddr("127.0.0.1")
		}
		if got.from != want || got.ack != "v1" {
			t.Errorf("source %v: stream from %v acking %q, want from %v acking v1", src, got.from, got.ack, want)
		}
	}
}

// TestSourceAddr: distinct agents get distinct addresses of 127.0.0.0/8,
// none ending in 0 or 255.
func TestSourceAddr(t *testing.T) {
	seenAddrs := map[netip.Addr]bool{}
	for k := range 70000 {
		a := SourceAddr(k)
		b := a.As4()
		if b[0] != 127 || b[3] == 0 || b[3] == 255 || seenAddrs[a] {
			t.Fatalf("SourceAddr(%d) = %v: not a fresh loopback host address", k, a)
		}
		seenAddrs[a] = true
	}
}

// TestTLS: an agent with a TLS configuration dials mTLS and presents its
// certificate.
func TestTLS(t *testing.T) {
	ca := certtest.NewCA(t, "loadagent test ca")
	srvCert, srvKey := ca.Issue(t, "server", true)
	addr, streams := serve(t, certtest.ServerTLS(t, srvCert, srvKey, ca))
	cliCert, cliKey := ca.Issue(t, "agent-7", false)
	e := runAgent(t, Config{Addrs: []string{addr}, Namespace: "ns", Pod: "p", TLS: certtest.ClientTLS(t, ca, cliCert, cliKey)})
	got := <-streams
	if got.cn != "agent-7" || e.Version != "v1" {
		t.Errorf("stream of certificate %q, agent applied %q; want agent-7 and v1", got.cn, e.Version)
	}
}
