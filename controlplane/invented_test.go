package controlplane_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/meshdns/meshdns/controlplane/internal/cptest"
)

// BenchmarkInventedNamespaces is a client opening streams for namespaces
// that exist nowhere (no source names them), against a control plane child
// serving $MESHDNS_BENCH_NAMES names (20,000) and taking the agents' claims
// (the library's insecure default; the binary would also require a
// credential). It reports the control plane's RSS before and after
// $MESHDNS_BENCH_INVENTED (400) streams, and its views: each invented
// namespace used to get a view of its own (a full table built and encoded
// per namespace); now they share one.
//
//	go test ./controlplane -run '^$' -bench InventedNamespaces -benchtime 1x
func BenchmarkInventedNamespaces(b *testing.B) {
	names, invented := envInt("MESHDNS_BENCH_NAMES", 20000), envInt("MESHDNS_BENCH_INVENTED", 400)
	dir := b.TempDir()
	writeEntries(b, dir, names, 8, 0, "10.255.0.1", true)
	for b.Loop() {
		cp := startBenchCP(b, dir, "", nil)
		// The first stream waits for the first version; after it the
		// control plane holds its model and the one view.
		first := cptest.Dial(b, cp.grpc, cptest.DialOpts{Namespace: "warmup"})
		first.Next()
		time.Sleep(time.Second)
		rss0 := rssBytes(b, cp.pid())
		start := time.Now()
		for i := range invented {
			a := cptest.Dial(b, cp.grpc, cptest.DialOpts{Namespace: fmt.Sprintf("invented-%d", i), Pod: fmt.Sprintf("p%d", i)})
			a.Next()
			if len(a.Table) != names {
				b.Fatalf("invented namespace got %d names, want %d", len(a.Table), names)
			}
		}
		took := time.Since(start)
		time.Sleep(time.Second)
		rss1 := rssBytes(b, cp.pid())
		views := scrape(b, cp.admin, "meshdns_controlplane_views")
		b.ReportMetric(rss0/(1<<20), "rss-before-MiB")
		b.ReportMetric(rss1/(1<<20), "rss-after-MiB")
		b.ReportMetric(views, "views")
		b.Logf("%d names; %d invented namespaces in %v: control plane RSS %.0f MiB -> %.0f MiB, %v views",
			names, invented, took.Round(time.Millisecond), rss0/(1<<20), rss1/(1<<20), views)
		cp.stop()
	}
}
