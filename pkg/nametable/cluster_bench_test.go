package nametable

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// clusterEntries is n services shaped like a cluster, as the agent's
// start benchmarks hold them (agent/ingest, hack/benchdns): 5%
// ExternalName, 10% headless with 3-10 endpoints named pod-K, the rest
// ClusterIP with one or two named ports, in 100 namespaces.
func clusterEntries(n int) []Entry {
	es := make([]Entry, n)
	http := []Port{{Name: "http", Port: 80, Protocol: "TCP"}}
	both := []Port{{Name: "http", Port: 80, Protocol: "TCP"}, {Name: "grpc", Port: 9090, Protocol: "TCP"}}
	headless := []Port{{Name: "http", Port: 8080, Protocol: "TCP"}}
	for i := range es {
		ns := fmt.Sprintf("ns-%d", i%benchNamespaces)
		svc := fmt.Sprintf("svc-%d", i)
		e := Entry{Hostname: svc + "." + ns + ".svc.cluster.local", Registry: "Kubernetes", ShortName: svc, Namespace: ns}
		switch {
		case i%20 == 7:
			e.CanonicalName = fmt.Sprintf("ext-%d.example.com", i)
		case i%10 == 3:
			e.Ports = headless
			for k := range 3 + i%8 {
				e.Endpoints = append(e.Endpoints, Endpoint{Hostname: fmt.Sprintf("pod-%d", k),
					IPs: []netip.Addr{netip.AddrFrom4([4]byte{10, byte(128 + k), byte(i >> 8), byte(i)})}})
			}
		default:
			e.IPs = []netip.Addr{netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})}
			e.Ports = http
			if i%2 == 0 {
				e.Ports = both
			}
		}
		es[i] = e
	}
	return es
}

// BenchmarkBuildCluster builds the table of 100,000 cluster-shaped
// services through a Builder with the agent's hint (the number of
// entries and an eighth), the work on the critical path of an agent's
// start, and reports the process's CPU time per build besides the wall
// time, and the time of Table (the finish, which nothing overlaps)
// alone.
func BenchmarkBuildCluster(b *testing.B) {
	const n = 100_000
	es := clusterEntries(n)
	pod := Context{Namespace: "ns-0"}
	zones := []string{"cluster.local"}
	b.ReportAllocs()
	var finish int64
	cpu0, ok := testenv.ProcessCPUTime()
	for b.Loop() {
		bb, err := NewBuilder(zones, pod, n+n/8)
		if err != nil {
			b.Fatal(err)
		}
		for i := range es {
			if err := bb.Add(&es[i]); err != nil {
				b.Fatal(err)
			}
		}
		start := time.Now()
		runtime.KeepAlive(bb.Table())
		finish += time.Since(start).Nanoseconds()
	}
	if cpu1, ok2 := testenv.ProcessCPUTime(); ok && ok2 {
		b.ReportMetric((cpu1-cpu0).Seconds()/float64(b.N), "cpu-s/op")
	}
	b.ReportMetric(float64(finish)/float64(b.N), "finish-ns/op")
}
