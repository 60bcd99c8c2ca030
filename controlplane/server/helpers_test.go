package server_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/controlplane/view"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// harness is a real control plane (registry, views, gRPC server on
// 127.0.0.1:0) in the test process.
type harness struct {
	reg   *registry.Registry
	views *view.Store
	srv   *server.Server
	addr  string
	prom  *prometheus.Registry
}

type harnessOpts struct {
	debounce   time.Duration
	history    int
	tls        *tls.Config
	keepalive  time.Duration
	admissions int
	// server changes the server's configuration before New.
	server func(*server.Config)
}

func newHarness(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	if o.debounce == 0 {
		o.debounce = 10 * time.Millisecond
	}
	prom := prometheus.NewRegistry()
	reg, err := registry.New(registry.Config{Debounce: o.debounce, Registerer: prom})
	if err != nil {
		t.Fatal(err)
	}
	views, err := view.New(view.Config{History: o.history, Registerer: prom})
	if err != nil {
		t.Fatal(err)
	}
	cfg := server.Config{Views: views, TLS: o.tls, Registerer: prom,
		KeepaliveTime: o.keepalive, KeepaliveTimeout: o.keepalive, MaxAdmissions: o.admissions}
	if o.server != nil {
		o.server(&cfg)
	}
	srv, err := server.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(3)
	go func() { defer wg.Done(); _ = reg.Run(ctx) }()
	go func() { defer wg.Done(); _ = views.Run(ctx, reg) }()
	go func() { defer wg.Done(); _ = srv.Serve(ctx, lis) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return &harness{reg: reg, views: views, srv: srv, addr: lis.Addr().String(), prom: prom}
}

// publish sets the "test" source and waits until the model has it.
func (h *harness) publish(t testing.TB, entries ...registry.Entry) uint64 {
	t.Helper()
	before := uint64(0)
	if m := h.reg.Latest(); m != nil {
		before = m.Version
	}
	h.reg.Update("test", registry.Snapshot{Entries: entries, Zones: []string{"corp.example"}, Changed: time.Now()})
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if m := h.reg.Latest(); m != nil && m.Version > before && h.views.Version() >= m.Version {
			return m.Version
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("no new version published")
	return 0
}

// metric returns the value of a counter or gauge (summed over labels
// matching label=value when given) or the sample count of a histogram.
func (h *harness) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := h.prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if !matches(m, labels) {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			}
		}
	}
	return sum
}

func matches(m *dto.Metric, labels []string) bool {
	for i := 0; i+1 < len(labels); i += 2 {
		ok := false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

func entry(host string, ip string, namespaces ...string) registry.Entry {
	return registry.Entry{
		Entry:      nametable.Entry{Hostname: host, IPs: []netip.Addr{netip.MustParseAddr(ip)}, Registry: "File"},
		Namespaces: namespaces,
	}
}

// manyEntries returns n entries named e<i>.corp.example.
func manyEntries(n int) []registry.Entry {
	es := make([]registry.Entry, n)
	for i := range es {
		es[i] = entry(fmt.Sprintf("e%d.corp.example", i), fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
		es[i].Ports = []nametable.Port{{Name: "http", Port: 80, Protocol: "TCP"}}
	}
	return es
}

func viewKey(ns string) view.Key { return view.Key{Namespace: ns} }

// waitFor polls cond for up to 5s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, what, 5*time.Second, cond)
}

func timeAfter5s() <-chan time.Time { return time.After(5 * time.Second) }
