package server_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/controlplane/view"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/meshdns/meshdns/pkg/nametable"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
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
	// idleTTL is how long the store keeps a view without agents; zero
	// means the store's default.
	idleTTL time.Duration
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
	views, err := view.New(view.Config{History: o.history, IdleTTL: o.idleTTL, Registerer: prom})
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

// fleet drives test agents at once, as real agents answer on their own:
// with a staged rollout, an agent held back gets a version only once
// the canaries ACKed it, so a test reading agents one after the other
// would wait on one that is held before it reads the canaries.
type fleet struct {
	t      testing.TB
	agents []*cptest.Agent
	dead   map[int]bool // agents whose stream the test ended: not waited on
}

// step waits for the next response of any agent (up to 10s) and returns
// the agent's index.
func (f *fleet) step() (int, *meshdnsv1.StreamNameTableResponse) {
	f.t.Helper()
	cases := make([]reflect.SelectCase, 0, len(f.agents)+1)
	for i, a := range f.agents {
		ch := reflect.ValueOf(a.Resps)
		if f.dead[i] {
			ch = reflect.ValueOf((chan *meshdnsv1.StreamNameTableResponse)(nil)) // never ready
		}
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: ch})
	}
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(time.After(10 * time.Second))})
	i, v, ok := reflect.Select(cases)
	switch {
	case i == len(f.agents):
		f.t.Fatal("no agent got a response within 10s")
	case !ok:
		f.t.Fatalf("agent %d: stream ended: %v", i, <-f.agents[i].Errs)
	}
	return i, v.Interface().(*meshdnsv1.StreamNameTableResponse)
}

// run applies and ACKs every response until done holds (checked before
// each wait), handing each to handle first: a response it takes (true)
// is not applied nor ACKed.
func (f *fleet) run(done func() bool, handle func(i int, r *meshdnsv1.StreamNameTableResponse) bool) {
	f.t.Helper()
	for !done() {
		i, r := f.step()
		if handle != nil && handle(i, r) {
			continue
		}
		a := f.agents[i]
		if err := a.Apply(r); err != nil {
			f.t.Fatalf("agent %d: %v", i, err)
		}
		a.Ack(r)
	}
}

// nextAll has every agent of as receive, apply and ACK one response, and
// returns them in the order of as.
func nextAll(t testing.TB, as ...*cptest.Agent) []*meshdnsv1.StreamNameTableResponse {
	t.Helper()
	f := &fleet{t: t, agents: as}
	out := make([]*meshdnsv1.StreamNameTableResponse, len(as))
	left := len(as)
	f.run(func() bool { return left == 0 }, func(i int, r *meshdnsv1.StreamNameTableResponse) bool {
		if out[i] != nil {
			t.Fatalf("agent %d: a second response %q before the others got one", i, r.GetVersionInfo())
		}
		out[i] = r
		left--
		return false
	})
	return out
}
