package discovery

import (
	"fmt"
	"testing"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// BenchmarkStreamFull100k measures a 100,000-name full table from a real
// gRPC server on loopback to its ACK: the transport, the copy into the
// state dir and the walk of every name (the agent's build is left out).
func BenchmarkStreamFull100k(b *testing.B) {
	big := &meshdnsv1.NameTable{Table: map[string]*meshdnsv1.NameInfo{}, AuthoritativeZones: []string{"cluster.local"}}
	for i := range 100_000 {
		big.Table[fmt.Sprintf("svc-%d.ns-%d.svc.cluster.local", i, i%100)] = &meshdnsv1.NameInfo{
			Ips: []string{fmt.Sprintf("10.%d.%d.%d", i>>16, (i>>8)&255, i&255)}, Registry: "Kubernetes"}
	}
	srv := discoverytest.Start(b, "127.0.0.1:0", nil)
	names := 0
	startClient(b, Config{Addrs: []string{srv.Addr}, StateDir: b.TempDir(),
		Apply: func(v *Version) error {
			names = 0
			return v.Walk(func(_, _ []byte) error { names++; return nil }, nil)
		}})
	srv.Recv(b)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		v := fmt.Sprintf("v%d", i)
		i++
		srv.Send(full(v, v, big))
		if got := srv.Recv(b); got.GetVersionInfo() != v || got.GetErrorDetail() != nil {
			b.Fatalf("ack = %v", got)
		}
	}
	if names != len(big.Table) {
		b.Fatalf("walked %d names, want %d", names, len(big.Table))
	}
}
