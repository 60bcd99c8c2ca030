package replicas

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/loadagent"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// populate writes services ClusterIP Services and headless Services of
// eps endpoints each (one EndpointSlice apiece) spread over the
// namespaces, with 32 writers.
func populate(b *testing.B, c *kubetest.Cluster, namespaces []string, services, headless, eps int) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	work := make(chan int)
	var failed atomic.Value
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := writeService(ctx, c, namespaces[i%len(namespaces)], i, i >= services, eps); err != nil {
					failed.Store(err)
				}
			}
		}()
	}
	start := time.Now()
	for i := range services + headless {
		if i > 0 && i%10000 == 0 {
			b.Logf("%d objects written in %v", i, time.Since(start).Round(time.Second))
		}
		work <- i
	}
	close(work)
	wg.Wait()
	if err, ok := failed.Load().(error); ok {
		b.Fatal(err)
	}
}

func writeService(ctx context.Context, c *kubetest.Cluster, ns string, i int, headless bool, eps int) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%d", i), Labels: map[string]string{"app": fmt.Sprintf("svc-%d", i)}},
		Spec: corev1.ServiceSpec{
			Selector: map[string]string{"app": fmt.Sprintf("svc-%d", i)},
			Ports:    []corev1.ServicePort{{Name: "http", Port: 80}, {Name: "grpc", Port: 9090}},
		},
	}
	if headless {
		svc.Spec.ClusterIP = corev1.ClusterIPNone
	}
	for try := 0; ; try++ {
		_, err := c.Client.CoreV1().Services(ns).Create(ctx, svc, metav1.CreateOptions{})
		if err == nil {
			break
		}
		if try == 5 {
			return fmt.Errorf("create service %s/%s: %w", ns, svc.Name, err)
		}
		time.Sleep(time.Duration(try+1) * 200 * time.Millisecond)
	}
	if !headless {
		return nil
	}
	name, port, proto := "http", int32(80), corev1.ProtocolTCP
	es := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svc.Name + "-abcde", Labels: map[string]string{discoveryv1.LabelServiceName: svc.Name}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: &name, Port: &port, Protocol: &proto}},
	}
	ready := true
	for e := range eps {
		host := fmt.Sprintf("pod-%d", e)
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.%d.%d.%d", 128+i>>16&63, i>>8&255, i&255^e)},
			Hostname:   &host,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready},
		})
	}
	for try := 0; ; try++ {
		_, err := c.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, es, metav1.CreateOptions{})
		if err == nil {
			return nil
		}
		if try == 5 {
			return fmt.Errorf("create endpointslice %s/%s: %w", ns, es.Name, err)
		}
		time.Sleep(time.Duration(try+1) * 200 * time.Millisecond)
	}
}

func scrapeMetric(b *testing.B, admin, name string) float64 {
	b.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	v, ok := findMetric(resp, name)
	if !ok {
		return -1
	}
	return v
}

// BenchmarkKubeScale sizes the control plane against a real API server:
// MESHDNS_BENCH_SERVICES (10,000) ClusterIP Services and
// MESHDNS_BENCH_HEADLESS (100) headless Services of 10 endpoints each, in
// MESHDNS_BENCH_NAMESPACES (100) namespaces, watched by
// MESHDNS_BENCH_REPLICAS (1) `meshdns controlplane` processes, with
// MESHDNS_BENCH_AGENTS (10) lightweight agents per replica spread over the
// first MESHDNS_BENCH_AGENT_NAMESPACES (1) namespaces (one view each; a
// view of N names costs about what one more copy of the names does). It
// reports the
// time from a replica's start to its agents' first full table, the
// replica's heap and RSS then, and, per iteration, the time from a Service
// create to every agent's delta holding it.
func BenchmarkKubeScale(b *testing.B) {
	nSvc := envInt("MESHDNS_BENCH_SERVICES", 10000)
	nHeadless := envInt("MESHDNS_BENCH_HEADLESS", 100)
	nNS := envInt("MESHDNS_BENCH_NAMESPACES", 100)
	nReplicas := envInt("MESHDNS_BENCH_REPLICAS", 1)
	nAgents := envInt("MESHDNS_BENCH_AGENTS", 10)
	nViews := envInt("MESHDNS_BENCH_AGENT_NAMESPACES", 1)
	// A /15 holds 100,000 ClusterIPs (the default /16 does not); not wider:
	// the allocator rewrites its whole bitmap (16 KiB for a /15) in etcd on
	// every create, and a /12 (128 KiB) slows creates to ~15/s.
	c := kubetest.Start(b, kubetest.WithServiceCIDRs("10.96.0.0/15"), kubetest.WithStartTimeout(3*time.Minute))
	namespaces := make([]string, nNS)
	for i := range namespaces {
		namespaces[i] = c.Namespace(b, "scale")
	}
	t0 := time.Now()
	populate(b, c, namespaces, nSvc, nHeadless, 10)
	b.Logf("wrote %d services and %d headless services (10 endpoints each) in %d namespaces in %v",
		nSvc, nHeadless, nNS, time.Since(t0).Round(time.Millisecond))

	type rep struct {
		*replica
		firstTable time.Duration
	}
	watchNS := namespaces[0]
	var reps []rep
	var agents []*agent
	for r := range nReplicas {
		start := time.Now()
		rp := startReplica(b, c, testenv.FreeAddr(b))
		for k := range nAgents {
			agents = append(agents, startAgent(b, loadagent.Config{Addrs: []string{rp.grpc}, Namespace: namespaces[k%min(nViews, nNS)],
				Pod: fmt.Sprintf("pod-%d-%d", r, k), Index: r*nAgents + k, Watch: "probe-0." + watchNS + ".svc.cluster.local"}))
		}
		for _, a := range agents[r*nAgents:] {
			if e := a.next(b, "first table"); e.Kind != "full" {
				b.Fatalf("first response %s, want full", e.Kind)
			}
		}
		reps = append(reps, rep{replica: rp, firstTable: time.Since(start)})
	}
	time.Sleep(2 * time.Second) // let the first tables' garbage be collected
	var report []func()
	for i, rp := range reps {
		heap := scrapeMetric(b, rp.admin, "go_memstats_heap_inuse_bytes")
		rss := scrapeMetric(b, rp.admin, "process_resident_memory_bytes")
		names := scrapeMetric(b, rp.admin, "meshdns_controlplane_names")
		views := scrapeMetric(b, rp.admin, "meshdns_controlplane_views")
		b.Logf("replica %d: start to first table at %d agents %v; %.0f names, %.0f views; heap in use %.1f MiB, RSS %.1f MiB",
			i, nAgents, rp.firstTable.Round(time.Millisecond), names, views, heap/(1<<20), rss/(1<<20))
		report = append(report, func() {
			b.ReportMetric(rp.firstTable.Seconds(), "first-table-s")
			b.ReportMetric(heap/(1<<20), "cp-heap-MiB")
			b.ReportMetric(rss/(1<<20), "cp-rss-MiB")
		})
	}

	var lat []time.Duration
	iter := 0
	b.ResetTimer()
	for b.Loop() {
		name := fmt.Sprintf("probe-%d", iter)
		iter++
		start := time.Now()
		svc, err := c.Client.CoreV1().Services(watchNS).Create(context.Background(), &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80}}},
		}, metav1.CreateOptions{})
		if err != nil {
			b.Fatal(err)
		}
		// Agents watch probe-0 only; later probes are seen as deltas.
		for _, a := range agents {
			for {
				e := a.next(b, "service change")
				if e.Kind != "delta" {
					b.Fatalf("a one-service change came as %s", e.Kind)
				}
				if iter > 1 || e.Watched == svc.Spec.ClusterIP {
					break
				}
			}
			lat = append(lat, time.Since(start))
		}
	}
	b.StopTimer()
	for _, r := range report {
		r()
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Milliseconds()), "change-p50-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Milliseconds()), "change-max-ms")
	b.Logf("service create to every agent's delta: p50 %v max %v over %d", lat[len(lat)/2].Round(time.Millisecond),
		lat[len(lat)-1].Round(time.Millisecond), len(lat))
}
