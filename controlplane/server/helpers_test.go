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
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/controlplane/view"
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
	debounce  time.Duration
	queue     int
	history   int
	tls       *tls.Config
	keepalive time.Duration
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
	srv, err := server.New(server.Config{Views: views, QueueSize: o.queue, TLS: o.tls, Registerer: prom, KeepaliveTime: o.keepalive})
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

// testAgent is a thin agent written for the tests: it keeps the table the
// responses describe, as the real agent must.
type testAgent struct {
	t      testing.TB
	conn   *grpc.ClientConn
	stream grpc.BidiStreamingClient[meshdnsv1.StreamNameTableRequest, meshdnsv1.StreamNameTableResponse]
	cancel context.CancelFunc
	resps  chan *meshdnsv1.StreamNameTableResponse
	errs   chan error

	version string
	table   map[string]*meshdnsv1.NameInfo
	zones   []string
}

type dialOpts struct {
	namespace, pod, resume string
	tls                    *tls.Config
	// noRead leaves responses unread (a slow agent).
	noRead bool
}

func dial(t testing.TB, addr string, o dialOpts) *testAgent {
	t.Helper()
	creds := insecure.NewCredentials()
	if o.tls != nil {
		creds = credentials.NewTLS(o.tls)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st, err := meshdnsv1.NewNameDiscoveryServiceClient(conn).StreamNameTable(ctx)
	a := &testAgent{t: t, conn: conn, stream: st, cancel: cancel, resps: make(chan *meshdnsv1.StreamNameTableResponse, 64),
		errs: make(chan error, 1), version: o.resume, table: map[string]*meshdnsv1.NameInfo{}}
	if o.pod == "" {
		o.pod = "pod"
	}
	t.Cleanup(a.close)
	if err == nil {
		err = st.Send(&meshdnsv1.StreamNameTableRequest{
			Identity:    &meshdnsv1.AgentIdentity{PodName: o.pod, Namespace: o.namespace, InstanceId: "test-" + o.pod},
			VersionInfo: o.resume,
		})
	}
	if err != nil {
		// Refused (TLS): report it through the channels like a stream
		// error.
		a.errs <- err
		close(a.resps)
		return a
	}
	if !o.noRead {
		go a.read()
	}
	return a
}

func (a *testAgent) read() {
	for {
		r, err := a.stream.Recv()
		if err != nil {
			a.errs <- err
			close(a.resps)
			return
		}
		a.resps <- r
	}
}

func (a *testAgent) close() {
	a.cancel()
	a.conn.Close()
}

// recv waits for the next response.
func (a *testAgent) recv() *meshdnsv1.StreamNameTableResponse {
	a.t.Helper()
	select {
	case r, ok := <-a.resps:
		if !ok {
			a.t.Fatalf("stream ended: %v", <-a.errs)
		}
		return r
	case <-time.After(5 * time.Second):
		a.t.Fatal("no response within 5s")
	}
	return nil
}

// none asserts that nothing arrives for d.
func (a *testAgent) none(d time.Duration) {
	a.t.Helper()
	select {
	case r := <-a.resps:
		a.t.Fatalf("unexpected response %v", r)
	case <-time.After(d):
	}
}

// apply changes the table as the response says, or fails as the agent
// would NACK.
func (a *testAgent) apply(r *meshdnsv1.StreamNameTableResponse) error {
	switch u := r.GetUpdate().(type) {
	case *meshdnsv1.StreamNameTableResponse_Full:
		a.table = map[string]*meshdnsv1.NameInfo{}
		for k, v := range u.Full.GetTable() {
			a.table[k] = v
		}
		a.zones = u.Full.GetAuthoritativeZones()
	case *meshdnsv1.StreamNameTableResponse_Delta:
		if u.Delta.GetBaseVersion() != a.version {
			return fmt.Errorf("delta base %q, have %q", u.Delta.GetBaseVersion(), a.version)
		}
		for k, v := range u.Delta.GetUpserted() {
			a.table[k] = v
		}
		for _, k := range u.Delta.GetRemoved() {
			delete(a.table, k)
		}
		if zs := u.Delta.GetAuthoritativeZones(); zs != nil {
			a.zones = zs.GetZones()
		}
	default:
		return fmt.Errorf("response without update")
	}
	a.version = r.GetVersionInfo()
	return nil
}

func (a *testAgent) ack(r *meshdnsv1.StreamNameTableResponse) {
	a.t.Helper()
	if err := a.stream.Send(&meshdnsv1.StreamNameTableRequest{VersionInfo: a.version, ResponseNonce: r.GetNonce()}); err != nil {
		a.t.Fatal(err)
	}
}

func (a *testAgent) nack(r *meshdnsv1.StreamNameTableResponse, msg string) {
	a.t.Helper()
	if err := a.stream.Send(&meshdnsv1.StreamNameTableRequest{VersionInfo: a.version, ResponseNonce: r.GetNonce(),
		ErrorDetail: &meshdnsv1.ErrorDetail{Code: 3, Message: msg}}); err != nil {
		a.t.Fatal(err)
	}
}

// next receives, applies and ACKs one response, failing on a bad one.
func (a *testAgent) next() *meshdnsv1.StreamNameTableResponse {
	a.t.Helper()
	r := a.recv()
	if err := a.apply(r); err != nil {
		a.t.Fatal(err)
	}
	a.ack(r)
	return r
}

// ips returns hostname -> first IP of the agent's table.
func (a *testAgent) ips() map[string]string {
	out := map[string]string{}
	for k, v := range a.table {
		if len(v.GetIps()) > 0 {
			out[k] = v.GetIps()[0]
		} else {
			out[k] = ""
		}
	}
	return out
}

func kind(r *meshdnsv1.StreamNameTableResponse) string {
	switch r.GetUpdate().(type) {
	case *meshdnsv1.StreamNameTableResponse_Full:
		return "full"
	case *meshdnsv1.StreamNameTableResponse_Delta:
		return "delta"
	}
	return "none"
}

func viewKey(ns string) view.Key { return view.Key{Namespace: ns} }

// waitFor polls cond for up to 5s.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func timeAfter5s() <-chan time.Time { return time.After(5 * time.Second) }
