package agentstream

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/emptypb"

	"github.com/meshdns/meshdns/internal/testkit/certtest"
)

// clientName is the common name of the client certificate a stream's
// context carries, or "plaintext".
func clientName(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "no peer"
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return "plaintext"
	}
	if len(ti.State.PeerCertificates) == 0 {
		return "no client certificate"
	}
	return ti.State.PeerCertificates[0].Subject.CommonName
}

// One listener: the agents' method is served by agentstream, another by
// grpc-go, each with the connection's identity, for a grpc-go client.
func TestOtherMethodsGoToGRPC(t *testing.T) {
	ca := certtest.NewCA(t, "test ca")
	srvCert, srvKey := ca.Issue(t, "server", true)
	cliCert, cliKey := ca.Issue(t, "agent-1", false)
	tests := []struct {
		name   string
		server *tls.Config
		client credentials.TransportCredentials
		who    string
	}{
		{name: "plaintext", client: insecure.NewCredentials(), who: "plaintext"},
		{name: "mTLS", server: certtest.ServerTLS(t, srvCert, srvKey, ca),
			client: credentials.NewTLS(certtest.ClientTLS(t, ca, cliCert, cliKey)), who: "agent-1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := newTestHandler()
			whoLean := make(chan string, 1)
			h.reply = func(st *Stream, msg []byte) {
				select {
				case whoLean <- clientName(st.Context()):
				default:
				}
				echo(st, msg)
			}
			s, err := New(Config{Method: testMethod, Handler: h, TLS: tc.server})
			if err != nil {
				t.Fatal(err)
			}
			var opts []grpc.ServerOption
			if tc.server != nil {
				opts = append(opts, grpc.Creds(Creds()))
			}
			opts = append(opts, grpc.UnknownServiceHandler(func(_ any, st grpc.ServerStream) error {
				return status.Errorf(codes.Unimplemented, "grpc-go for %s", clientName(st.Context()))
			}))
			g := grpc.NewServer(opts...)
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{}, 2)
			go func() { _ = g.Serve(s.Fallback()); done <- struct{}{} }()
			go func() { _ = s.Serve(lis); done <- struct{}{} }()
			t.Cleanup(func() { g.Stop(); s.Close(); lis.Close(); <-done; <-done })

			cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(tc.client))
			if err != nil {
				t.Fatal(err)
			}
			defer cc.Close()
			ctx := t.Context()
			err = cc.Invoke(ctx, "/other.Service/Call", &emptypb.Empty{}, &emptypb.Empty{})
			if want := "grpc-go for " + tc.who; status.Code(err) != codes.Unimplemented || !strings.Contains(err.Error(), want) {
				t.Fatalf("other method: %v, want Unimplemented %q", err, want)
			}

			// A new connection, for the agents' method.
			cc2, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(tc.client))
			if err != nil {
				t.Fatal(err)
			}
			defer cc2.Close()
			cs, err := cc2.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, testMethod)
			if err != nil {
				t.Fatal(err)
			}
			if err := cs.SendMsg(&emptypb.Empty{}); err != nil {
				t.Fatal(err)
			}
			if err := cs.RecvMsg(&emptypb.Empty{}); err != nil {
				t.Fatalf("the echo: %v", err)
			}
			if got := <-whoLean; got != tc.who {
				t.Fatalf("agentstream's stream is of %q, want %q", got, tc.who)
			}
		})
	}
}
