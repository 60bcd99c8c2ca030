package loadagent

import (
	"fmt"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// bigServer sends a full table larger than the agent's windows, then a
// delta, reads both ACKs and ends the call with an error status.
type bigServer struct {
	meshdnsv1.UnimplementedNameDiscoveryServiceServer
	table *meshdnsv1.NameTable
	acks  chan string
}

func (s *bigServer) StreamNameTable(st meshdnsv1.NameDiscoveryService_StreamNameTableServer) error {
	if _, err := st.Recv(); err != nil {
		return err
	}
	for _, r := range []*meshdnsv1.StreamNameTableResponse{
		{VersionInfo: "v1", Nonce: "n1", Update: &meshdnsv1.StreamNameTableResponse_Full{Full: s.table}},
		{VersionInfo: "v2", Nonce: "n2", Update: &meshdnsv1.StreamNameTableResponse_Delta{Delta: &meshdnsv1.NameTableDelta{BaseVersion: "v1"}}},
	} {
		if err := st.Send(r); err != nil {
			return err
		}
		ack, err := st.Recv()
		if err != nil {
			return err
		}
		s.acks <- ack.GetVersionInfo() + "/" + ack.GetResponseNonce()
	}
	return status.Error(codes.Unavailable, "going away")
}

// TestStreamLargeTableAndEnd: a full table of 6 MiB (more than the
// agent's 4 MiB windows, so they must be given back as it is read) is
// read and ACKed, the delta after it too, and a call that ends with an
// error status is opened again.
func TestStreamLargeTableAndEnd(t *testing.T) {
	table := &meshdnsv1.NameTable{Table: map[string]*meshdnsv1.NameInfo{}}
	pad := string(make([]byte, 60<<10))
	for i := range 100 {
		table.Table[fmt.Sprintf("n%d.x", i)] = &meshdnsv1.NameInfo{Ips: []string{"10.0.0.1"}, AltHosts: []string{pad}}
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.MaxSendMsgSize(16 << 20))
	bs := &bigServer{table: table, acks: make(chan string, 8)}
	meshdnsv1.RegisterNameDiscoveryServiceServer(srv, bs)
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)

	e := runAgent(t, Config{Addrs: []string{lis.Addr().String()}, Namespace: "ns", Pod: "p", MinBackoff: 1})
	if e.Kind != "full" || e.Version != "v1" || e.Bytes < 6_000_000 {
		t.Errorf("first event = %+v, want the full table v1 of 6 MiB", e)
	}
	for i, want := range []string{"v1/n1", "v2/n2", "v1/n1"} {
		if got := <-bs.acks; got != want {
			t.Errorf("ACK %d = %q, want %q", i, got, want)
		}
	}
}
