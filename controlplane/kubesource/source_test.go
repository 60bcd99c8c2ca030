package kubesource

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// recorder is a registry.Sink that keeps every snapshot.
type recorder struct {
	mu    sync.Mutex // guards snaps
	snaps []registry.Snapshot
	ch    chan struct{}
}

func newRecorder() *recorder { return &recorder{ch: make(chan struct{}, 1)} }

func (r *recorder) Update(source string, s registry.Snapshot) {
	r.mu.Lock()
	r.snaps = append(r.snaps, s)
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.snaps)
}

func (r *recorder) last() (registry.Snapshot, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.snaps) == 0 {
		return registry.Snapshot{}, false
	}
	return r.snaps[len(r.snaps)-1], true
}

// wait returns the first latest snapshot for which ok holds, failing t
// after 20 seconds.
func (r *recorder) wait(t testing.TB, what string, ok func(registry.Snapshot) bool) registry.Snapshot {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		if s, have := r.last(); have && ok(s) {
			return s
		}
		select {
		case <-r.ch:
		case <-time.After(50 * time.Millisecond):
		case <-deadline:
			s, _ := r.last()
			t.Fatalf("timed out waiting for %s; last snapshot: %d entries, zones %v:\n%s", what, len(s.Entries), s.Zones, dump(s))
		}
	}
}

func dump(s registry.Snapshot) string {
	out := ""
	for _, e := range s.Entries {
		out += e.Hostname + "\n"
	}
	return out
}

// find returns the entry with hostname host.
func find(s registry.Snapshot, host string) (registry.Entry, bool) {
	for _, e := range s.Entries {
		if e.Hostname == host {
			return e, true
		}
	}
	return registry.Entry{}, false
}

// hasEntry waits for an entry to equal want.
func hasEntry(want registry.Entry) func(registry.Snapshot) bool {
	return func(s registry.Snapshot) bool {
		got, ok := find(s, want.Hostname)
		return ok && cmp.Equal(want, got, entryOpts())
	}
}

func lacks(host string) func(registry.Snapshot) bool {
	return func(s registry.Snapshot) bool { _, ok := find(s, host); return !ok }
}

// run starts src and stops it at cleanup, checking Run's result.
func run(t testing.TB, src *Source) *recorder {
	t.Helper()
	rec := newRecorder()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, rec) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("Run did not return after cancel")
		}
	})
	return rec
}

// fakeClient returns a fake clientset holding objs and a channel that
// receives a value per watch the informers open. client-go's fake watch
// drops events written between the informer's list and its watch, so tests
// write only after both watches are open.
func fakeClient(objs ...runtime.Object) (*fake.Clientset, <-chan struct{}) {
	c := fake.NewClientset(objs...)
	watches := make(chan struct{}, 16)
	// Open the watch on the tracker here, as the default reactor would,
	// and signal only once it is registered.
	c.PrependWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		w, err := c.Tracker().Watch(a.GetResource(), a.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		watches <- struct{}{}
		return true, w, nil
	})
	return c, watches
}

func waitWatches(t testing.TB, ch <-chan struct{}, n int) {
	t.Helper()
	for range n {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			t.Fatalf("informer watches not opened")
		}
	}
}

// clock is a settable Config.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func newSource(t testing.TB, cfg Config) *Source {
	t.Helper()
	src, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return src
}

func TestNewRejects(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{name: "no client", cfg: Config{}},
		{name: "bad selector", cfg: Config{Client: typed(fake.NewClientset()), LabelSelector: "a in (b"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg); err == nil {
				t.Errorf("New(%+v) = nil error", tt.cfg)
			}
		})
	}
}

// TestFakeLifecycle drives every kind of change through the informers and
// checks each resulting snapshot, with the change time from the clock.
func TestFakeLifecycle(t *testing.T) {
	client, watches := fakeClient(
		clusterIPService("app", "web", "10.96.0.10"),
		headlessService("app", "db"),
		slice("app", "db-1", "db", discoveryv1.AddressTypeIPv4, ep{addrs: []string{"10.1.0.2"}, hostname: "db-0"}),
		externalNameService("app", "ext", "db.example.com"),
	)
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	reg := prometheus.NewRegistry()
	src := newSource(t, Config{Client: typed(client), Now: clk.Now, Registerer: reg, ClusterDomain: "Cluster.Local."})
	rec := run(t, src)

	first := rec.wait(t, "first snapshot", func(registry.Snapshot) bool { return true })
	if diff := cmp.Diff([]string{"cluster.local"}, first.Zones); diff != "" {
		t.Errorf("zones (-want +got):\n%s", diff)
	}
	if !first.Changed.IsZero() {
		t.Errorf("first snapshot Changed = %v, want zero (initial list)", first.Changed)
	}
	var hosts []string
	for _, e := range first.Entries {
		hosts = append(hosts, e.Hostname)
	}
	if diff := cmp.Diff([]string{"db.app.svc.cluster.local", "ext.app.svc.cluster.local", "web.app.svc.cluster.local"}, hosts); diff != "" {
		t.Errorf("first snapshot hostnames (-want +got):\n%s", diff)
	}
	waitWatches(t, watches, 2)

	ctx := context.Background()
	svcs := client.CoreV1().Services("app")
	slicesAPI := client.DiscoveryV1().EndpointSlices("app")

	steps := []struct {
		name   string
		change func() error
		want   func(registry.Snapshot) bool
	}{
		{
			name: "external name becomes cluster IP",
			change: func() error {
				_, err := svcs.Update(ctx, clusterIPService("app", "ext", "10.96.0.20"), metav1.UpdateOptions{})
				return err
			},
			want: hasEntry(func() registry.Entry {
				e := kubeEntry("app", "ext")
				e.IPs = addrs("10.96.0.20")
				e.Ports = []nametable.Port{{Name: "http", Port: 80, Protocol: "TCP"}}
				return e
			}()),
		},
		{
			name: "endpoint added to the headless service",
			change: func() error {
				_, err := slicesAPI.Update(ctx, slice("app", "db-1", "db", discoveryv1.AddressTypeIPv4,
					ep{addrs: []string{"10.1.0.2"}, hostname: "db-0"},
					ep{addrs: []string{"10.1.0.3"}, hostname: "db-1"}), metav1.UpdateOptions{})
				return err
			},
			want: hasEntry(func() registry.Entry {
				e := kubeEntry("app", "db")
				e.Ports = []nametable.Port{{Name: "db", Port: 5432, Protocol: "TCP"}}
				e.Endpoints = []nametable.Endpoint{{Hostname: "db-0", IPs: addrs("10.1.0.2")}, {Hostname: "db-1", IPs: addrs("10.1.0.3")}}
				return e
			}()),
		},
		{
			name: "export-to annotation added",
			change: func() error {
				s := clusterIPService("app", "web", "10.96.0.10")
				s.Annotations = map[string]string{AnnotationExportTo: "frontend"}
				_, err := svcs.Update(ctx, s, metav1.UpdateOptions{})
				return err
			},
			want: func(s registry.Snapshot) bool {
				e, ok := find(s, "web.app.svc.cluster.local")
				return ok && slices.Equal(e.Namespaces, []string{"app", "frontend"})
			},
		},
		{
			name:   "cluster IP service deleted",
			change: func() error { return svcs.Delete(ctx, "web", metav1.DeleteOptions{}) },
			want:   lacks("web.app.svc.cluster.local"),
		},
		{
			name:   "slice deleted: the headless name stays, without endpoints",
			change: func() error { return slicesAPI.Delete(ctx, "db-1", metav1.DeleteOptions{}) },
			want: func(s registry.Snapshot) bool {
				e, ok := find(s, "db.app.svc.cluster.local")
				return ok && len(e.Endpoints) == 0
			},
		},
		{
			name:   "headless service deleted",
			change: func() error { return svcs.Delete(ctx, "db", metav1.DeleteOptions{}) },
			want:   lacks("db.app.svc.cluster.local"),
		},
	}
	for i, st := range steps {
		t.Run(st.name, func(t *testing.T) {
			at := time.Unix(1_800_000_000+int64(i+1)*10, 0)
			clk.Set(at)
			if err := st.change(); err != nil {
				t.Fatal(err)
			}
			got := rec.wait(t, st.name, st.want)
			if !got.Changed.Equal(at) {
				t.Errorf("Changed = %v, want the event time %v", got.Changed, at)
			}
			if diff := cmp.Diff([]string{"cluster.local"}, got.Zones); diff != "" {
				t.Errorf("zones (-want +got):\n%s", diff)
			}
		})
	}
	if got := testutil.ToFloat64(src.m.events.WithLabelValues("service", "delete")); got != 2 {
		t.Errorf("service delete events = %v, want 2", got)
	}
	if got := testutil.ToFloat64(src.m.synced); got != 1 {
		t.Errorf("synced gauge = %v, want 1", got)
	}
}

// TestFakeZoneOnlyAfterSync holds the Service list and checks that nothing,
// in particular no zone, reaches the registry until the informers sync.
func TestFakeZoneOnlyAfterSync(t *testing.T) {
	client, _ := fakeClient(
		clusterIPService("app", "web", "10.96.0.10"),
		slice("app", "web-1", "web", discoveryv1.AddressTypeIPv4, ep{addrs: []string{"10.1.0.2"}}),
	)
	// The Service list is held (in the Client, not in a fake reactor: the
	// fake clientset serialises every call behind one lock).
	release := make(chan struct{})
	spy := spyOn(typed(client))
	spy.gates = map[string]<-chan struct{}{"services": release}
	src := newSource(t, Config{Client: spy})
	rec := run(t, src)
	// Everything but the Service list is done: the slice informer has
	// listed and its add event is handled.
	spy.awaitLists(t, 10*time.Second, nil, "endpointslices")
	testenv.Eventually(t, "the slice's add event", 10*time.Second, func() bool {
		return testutil.ToFloat64(src.m.events.WithLabelValues("endpointslice", "add")) == 1
	})
	if n := rec.count(); n != 0 {
		t.Fatalf("%d snapshots before the informers synced, want 0", n)
	}
	if got := testutil.ToFloat64(src.m.synced); got != 0 {
		t.Errorf("synced gauge = %v before sync, want 0", got)
	}
	close(release)
	s := rec.wait(t, "first snapshot", func(registry.Snapshot) bool { return true })
	if diff := cmp.Diff([]string{"cluster.local"}, s.Zones); diff != "" {
		t.Errorf("zones (-want +got):\n%s", diff)
	}
	if _, ok := find(s, "web.app.svc.cluster.local"); !ok {
		t.Errorf("first snapshot lacks web: the zone was reported without the service listed")
	}
}

// rebuildReport is what one coalesced rebuild looked at (Source.rebuilt).
type rebuildReport struct {
	keys    []string
	changed time.Time
	sent    bool
}

// rebuilds returns a hook for Source.rebuilt and a channel of its reports.
func rebuilds() (func([]string, time.Time, bool), <-chan rebuildReport) {
	ch := make(chan rebuildReport, 64)
	return func(keys []string, changed time.Time, sent bool) {
		ch <- rebuildReport{keys: slices.Sorted(slices.Values(keys)), changed: changed, sent: sent}
	}, ch
}

// awaitRebuildAt returns the rebuild that handled the change made at the
// clock time at: events of the initial list carry no time, and every
// change of a test at its own instant.
func awaitRebuildAt(t testing.TB, ch <-chan rebuildReport, at time.Time) rebuildReport {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case r := <-ch:
			if r.changed.Equal(at) {
				return r
			}
		case <-deadline:
			t.Fatalf("no rebuild of the change made at %v", at)
		}
	}
}

// TestFakeNoSnapshotWithoutChange churns the slice of a ClusterIP service
// (its answers do not depend on endpoints) and checks that the rebuild it
// causes sends no snapshot, then that a real change still does.
func TestFakeNoSnapshotWithoutChange(t *testing.T) {
	client, watches := fakeClient(
		clusterIPService("app", "web", "10.96.0.10"),
		slice("app", "web-1", "web", discoveryv1.AddressTypeIPv4, ep{addrs: []string{"10.1.0.2"}}),
	)
	clk := &clock{t: time.Unix(1_800_000_000, 0)}
	src := newSource(t, Config{Client: typed(client), Now: clk.Now, Coalesce: 5 * time.Millisecond})
	hook, rebuilt := rebuilds()
	src.rebuilt = hook
	rec := run(t, src)
	rec.wait(t, "first snapshot", func(registry.Snapshot) bool { return true })
	waitWatches(t, watches, 2)

	ctx := context.Background()
	churn := time.Unix(1_800_000_010, 0)
	clk.Set(churn)
	_, err := client.DiscoveryV1().EndpointSlices("app").Update(ctx, slice("app", "web-1", "web", discoveryv1.AddressTypeIPv4,
		ep{addrs: []string{"10.1.0.3"}}), metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := awaitRebuildAt(t, rebuilt, churn)
	if diff := cmp.Diff([]string{"app/web"}, r.keys); diff != "" {
		t.Errorf("rebuilt keys (-want +got):\n%s", diff)
	}
	if r.sent {
		t.Errorf("the rebuild after an endpoint change behind a ClusterIP sent a snapshot")
	}
	if n := rec.count(); n != 1 {
		t.Errorf("%d snapshots after an endpoint change behind a ClusterIP, want 1 (the first)", n)
	}

	change := time.Unix(1_800_000_020, 0)
	clk.Set(change)
	if _, err := client.CoreV1().Services("app").Update(ctx, clusterIPService("app", "web", "10.96.0.11"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if r := awaitRebuildAt(t, rebuilt, change); !r.sent {
		t.Errorf("the rebuild after a cluster IP change sent no snapshot")
	}
	s := rec.wait(t, "new cluster IP", func(s registry.Snapshot) bool {
		e, ok := find(s, "web.app.svc.cluster.local")
		return ok && slices.Equal(e.IPs, addrs("10.96.0.11"))
	})
	if !s.Changed.Equal(change) {
		t.Errorf("Changed = %v, want %v", s.Changed, change)
	}
}

// TestFakeNamespaces watches two of three namespaces.
func TestFakeNamespaces(t *testing.T) {
	client, _ := fakeClient(
		clusterIPService("a", "web", "10.96.0.1"),
		clusterIPService("b", "web", "10.96.0.2"),
		clusterIPService("c", "web", "10.96.0.3"),
		headlessService("c", "db"),
		slice("c", "db-1", "db", discoveryv1.AddressTypeIPv4, ep{addrs: []string{"10.1.0.2"}}),
		slice("b", "db-1", "db", discoveryv1.AddressTypeIPv4, ep{addrs: []string{"10.1.0.9"}}),
	)
	src := newSource(t, Config{Client: typed(client), Namespaces: []string{"c", "a", "c"}})
	rec := run(t, src)
	s := rec.wait(t, "first snapshot", func(registry.Snapshot) bool { return true })
	var hosts []string
	for _, e := range s.Entries {
		hosts = append(hosts, e.Hostname)
	}
	// Snapshots are in ns/name order.
	if diff := cmp.Diff([]string{"web.a.svc.cluster.local", "db.c.svc.cluster.local", "web.c.svc.cluster.local"}, hosts); diff != "" {
		t.Errorf("hostnames (-want +got):\n%s", diff)
	}
	db, _ := find(s, "db.c.svc.cluster.local")
	if diff := cmp.Diff([]nametable.Endpoint{{IPs: addrs("10.1.0.2")}}, db.Endpoints, entryOpts()); diff != "" {
		t.Errorf("db endpoints (-want +got):\n%s", diff)
	}
}

// TestFakeTriggerTime checks that a slice change carrying the EndpointSlice
// controller's trigger time starts the latency there, and that an update
// keeping an old stamp falls back to the receipt time.
func TestFakeTriggerTime(t *testing.T) {
	client, watches := fakeClient(headlessService("app", "db"))
	clk := &clock{t: time.Unix(1_800_000_100, 0)}
	src := newSource(t, Config{Client: typed(client), Now: clk.Now})
	rec := run(t, src)
	rec.wait(t, "first snapshot", func(registry.Snapshot) bool { return true })
	waitWatches(t, watches, 2)

	trigger := time.Unix(1_800_000_099, 250_000_000).UTC()
	s := slice("app", "db-1", "db", discoveryv1.AddressTypeIPv4, ep{addrs: []string{"10.1.0.2"}})
	s.Annotations = map[string]string{corev1.EndpointsLastChangeTriggerTime: trigger.Format(time.RFC3339Nano)}
	ctx := context.Background()
	if _, err := client.DiscoveryV1().EndpointSlices("app").Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := rec.wait(t, "endpoint", func(s registry.Snapshot) bool {
		e, _ := find(s, "db.app.svc.cluster.local")
		return len(e.Endpoints) == 1
	})
	if !got.Changed.Equal(trigger) {
		t.Errorf("Changed = %v, want the trigger time %v", got.Changed, trigger)
	}

	clk.Set(time.Unix(1_800_000_200, 0))
	s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.1.0.3"}})
	if _, err := client.DiscoveryV1().EndpointSlices("app").Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	got = rec.wait(t, "second endpoint", func(s registry.Snapshot) bool {
		e, _ := find(s, "db.app.svc.cluster.local")
		return len(e.Endpoints) == 2
	})
	if !got.Changed.Equal(clk.Now()) {
		t.Errorf("Changed = %v, want the receipt time %v (stamp unchanged)", got.Changed, clk.Now())
	}
}

var _ kubernetes.Interface = (*fake.Clientset)(nil)

// TestFakeCoalesce writes a burst of services faster than the coalescing
// period and checks that they arrive in far fewer snapshots than events,
// with the earliest event's time.
func TestFakeCoalesce(t *testing.T) {
	client, watches := fakeClient()
	clk := &clock{t: time.Unix(1_800_000_300, 0)}
	src := newSource(t, Config{Client: typed(client), Now: clk.Now, Coalesce: 300 * time.Millisecond})
	rec := run(t, src)
	rec.wait(t, "first snapshot", func(registry.Snapshot) bool { return true })
	waitWatches(t, watches, 2)
	first := clk.Now()
	const n = 20
	for i := range n {
		svc := clusterIPService("app", fmt.Sprintf("svc-%02d", i), fmt.Sprintf("10.96.1.%d", i+1))
		if _, err := client.CoreV1().Services("app").Create(context.Background(), svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			// Later events must not move Changed: once the first is
			// received, the clock moves on.
			testenv.Eventually(t, "the first add event", 10*time.Second, func() bool {
				return testutil.ToFloat64(src.m.events.WithLabelValues("service", "add")) >= 1
			})
			clk.Set(first.Add(time.Second))
		}
	}
	s := rec.wait(t, "all services", func(s registry.Snapshot) bool { return len(s.Entries) == n })
	if got := rec.count() - 1; got > 3 {
		t.Errorf("%d snapshots for a burst of %d services, want at most 3", got, n)
	}
	if got := testutil.ToFloat64(src.m.events.WithLabelValues("service", "add")); got != n {
		t.Errorf("add events = %v, want %d", got, n)
	}
	if rec.count() == 2 && !s.Changed.Equal(first) {
		t.Errorf("Changed = %v, want the first event's time %v", s.Changed, first)
	}
}
