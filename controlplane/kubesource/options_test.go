package kubesource

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/meshdns/meshdns/controlplane/registry"
)

// The options of CoreDNS's kubernetes plugin, against a real API server
// (internal/testkit/kubetest). The differential test (e2e/difftest) compares the
// agent's answers under the same options with CoreDNS's.

func TestOptionsRejected(t *testing.T) {
	client := restClientFor(t, cluster.Get(t).Config)
	tests := []struct {
		name string
		cfg  Config
	}{
		{name: "bad namespace labels", cfg: Config{Client: client, Options: Options{NamespaceLabels: "a in (b"}}},
		{name: "namespaces and namespace labels", cfg: Config{Client: client, Namespaces: []string{"a"}, Options: Options{NamespaceLabels: "a=b"}}},
		{name: "namespace labels without a namespace client", cfg: Config{Client: typed(fake.NewClientset()), Options: Options{NamespaceLabels: "a=b"}}},
		{name: "negative startup timeout", cfg: Config{Client: client, Options: Options{StartupTimeout: -time.Second}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(tt.cfg); err == nil {
				t.Errorf("New = nil error")
			}
		})
	}
}

func TestAPIServerNamespaceLabels(t *testing.T) {
	c := cluster.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	on, off := c.Namespace(t, "nslabels-on"), c.Namespace(t, "nslabels-off")
	label := func(ns, v string) {
		t.Helper()
		n, err := c.Client.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Labels == nil {
			n.Labels = map[string]string{}
		}
		n.Labels["meshdns-test-dns"] = v
		if _, err := c.Client.CoreV1().Namespaces().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	label(on, on)
	label(off, "nope")
	for _, ns := range []string{on, off} {
		if _, err := c.Client.CoreV1().Services(ns).Create(ctx, clusterIPService(ns, "web"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	host := func(ns string) string { return "web." + ns + ".svc.cluster.local" }
	src := newSource(t, Config{Client: restClientFor(t, c.Config), Options: Options{NamespaceLabels: "meshdns-test-dns in (" + on + "," + off + ")"}})
	rec := run(t, src)
	// The watch of every namespace delivers both services; only the
	// labelled namespace's is exposed.
	first := rec.wait(t, "first snapshot", func(registry.Snapshot) bool { return true })
	if _, ok := find(first, host(on)); !ok {
		t.Errorf("first snapshot lacks %s", host(on))
	}
	if _, ok := find(first, host(off)); ok {
		t.Errorf("first snapshot has %s, whose namespace does not match", host(off))
	}
	// Labels change: the namespace that starts matching shows its
	// services, the one that stops hides them.
	label(off, off)
	rec.wait(t, "newly matching namespace", func(s registry.Snapshot) bool { _, ok := find(s, host(off)); return ok })
	label(on, "nope")
	rec.wait(t, "no longer matching namespace", lacks(host(on)))
}

func TestAPIServerEndpointPodNames(t *testing.T) {
	c := cluster.Get(t)
	ns := c.Namespace(t, "podnames")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, headlessService(ns, "db"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := slice(ns, "db-1", "db", discoveryv1.AddressTypeIPv4,
		ep{addrs: []string{"10.7.0.1"}},                  // pod db-0, no hostname: named after the pod
		ep{addrs: []string{"10.7.0.2"}, hostname: "own"}, // a hostname wins
		ep{addrs: []string{"10.7.0.3"}},                  // pod name with a dot: dashed IP
		ep{addrs: []string{"10.7.0.4"}})                  // no targetRef: dashed IP
	s.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "db-0"}
	s.Endpoints[1].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "db-1"}
	s.Endpoints[2].TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "db.2"}
	if _, err := c.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hostnames := func(opts Options) []string {
		t.Helper()
		src := newSource(t, Config{Client: restClientFor(t, c.Config), Namespaces: []string{ns}, Options: opts})
		snap := run(t, src).wait(t, "the endpoints", func(s registry.Snapshot) bool {
			e, ok := find(s, "db."+ns+".svc.cluster.local")
			return ok && len(e.Endpoints) == 4
		})
		e, _ := find(snap, "db."+ns+".svc.cluster.local")
		var out []string
		for _, ep := range e.Endpoints {
			out = append(out, ep.Hostname+"="+ep.IPs[0].String())
		}
		slices.Sort(out)
		return out
	}
	if got, want := hostnames(Options{EndpointPodNames: true}), []string{"=10.7.0.3", "=10.7.0.4", "db-0=10.7.0.1", "own=10.7.0.2"}; !slices.Equal(got, want) {
		t.Errorf("with endpoint pod names: %q, want %q", got, want)
	}
	if got, want := hostnames(Options{}), []string{"=10.7.0.1", "=10.7.0.3", "=10.7.0.4", "own=10.7.0.2"}; !slices.Equal(got, want) {
		t.Errorf("without: %q, want %q", got, want)
	}
}

func TestAPIServerIgnoreEmptyService(t *testing.T) {
	c := cluster.Get(t)
	ns := c.Namespace(t, "emptysvc")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	svcs, slicesAPI := c.Client.CoreV1().Services(ns), c.Client.DiscoveryV1().EndpointSlices(ns)
	for _, svc := range []*corev1.Service{clusterIPService(ns, "web"), headlessService(ns, "db"), externalNameService(ns, "ext", "example.org")} {
		if _, err := svcs.Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	web, db, ext := "web."+ns+".svc.cluster.local", "db."+ns+".svc.cluster.local", "ext."+ns+".svc.cluster.local"
	src := newSource(t, Config{Client: restClientFor(t, c.Config), Namespaces: []string{ns}, Options: Options{IgnoreEmptyService: true}})
	rec := run(t, src)
	first := rec.wait(t, "first snapshot", func(registry.Snapshot) bool { return true })
	if _, ok := find(first, web); ok {
		t.Errorf("a ClusterIP service without endpoints is in the table")
	}
	for _, h := range []string{db, ext} {
		if _, ok := find(first, h); !ok {
			t.Errorf("%s (headless or ExternalName, not affected) is missing", h)
		}
	}
	// Not-ready endpoints do not count; a ready one does.
	created, err := slicesAPI.Create(ctx, slice(ns, "web-1", "web", discoveryv1.AddressTypeIPv4, ep{addrs: []string{"10.8.0.1"}, ready: ptr(false)}), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The sentinel: a change to db after web's slice, seen in order.
	if _, err := slicesAPI.Create(ctx, slice(ns, "db-1", "db", discoveryv1.AddressTypeIPv4, ep{addrs: []string{"10.8.0.9"}}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	snap := rec.wait(t, "db's endpoint", func(s registry.Snapshot) bool { e, ok := find(s, db); return ok && len(e.Endpoints) == 1 })
	if _, ok := find(snap, web); ok {
		t.Errorf("a ClusterIP service with only not-ready endpoints is in the table")
	}
	created.Endpoints[0].Conditions.Ready = ptr(true)
	if _, err := slicesAPI.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "web with a ready endpoint", func(s registry.Snapshot) bool { _, ok := find(s, web); return ok })
	if err := slicesAPI.Delete(ctx, created.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "web without endpoints again", lacks(web))
}

func TestAPIServerNoEndpoints(t *testing.T) {
	c := cluster.Get(t)
	ns := c.Namespace(t, "noendpoints")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, headlessService(ns, "db"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, slice(ns, "db-1", "db", discoveryv1.AddressTypeIPv4, ep{addrs: []string{"10.9.0.1"}, hostname: "h"}), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	spy := spyOn(restClientFor(t, c.Config))
	src := newSource(t, Config{Client: spy, Namespaces: []string{ns}, Options: Options{NoEndpoints: true}})
	rec := run(t, src)
	first := rec.wait(t, "first snapshot", func(registry.Snapshot) bool { return true })
	if _, ok := find(first, "db."+ns+".svc.cluster.local"); ok {
		t.Errorf("a headless service is in the table without the endpoint watch")
	}
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, clusterIPService(ns, "web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	rec.wait(t, "a ClusterIP service", func(s registry.Snapshot) bool { _, ok := find(s, "web."+ns+".svc.cluster.local"); return ok })
	for {
		select {
		case l := <-spy.lists:
			if l.resource == "endpointslices" {
				t.Fatalf("the source listed EndpointSlices")
			}
			continue
		default:
		}
		break
	}
}

func TestAPIServerFallthrough(t *testing.T) {
	c := cluster.Get(t)
	ns := c.Namespace(t, "fallthrough")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, clusterIPService(ns, "web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	src := newSource(t, Config{Client: restClientFor(t, c.Config), Namespaces: []string{ns}, Options: Options{Fallthrough: true}})
	first := run(t, src).wait(t, "first snapshot", func(registry.Snapshot) bool { return true })
	if len(first.Zones) != 0 {
		t.Errorf("zones = %q, want none: names not in the table fall through", first.Zones)
	}
	if _, ok := find(first, "web."+ns+".svc.cluster.local"); !ok {
		t.Errorf("the service is missing")
	}
}

func TestAPIServerStartupTimeout(t *testing.T) {
	c := cluster.Get(t)
	ns := c.Namespace(t, "startup")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, clusterIPService(ns, "web"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The EndpointSlice list is held until the test lets it go, so the
	// sync cannot finish within the timeout however fast the machine.
	gate := make(chan struct{})
	spy := spyOn(restClientFor(t, c.Config))
	spy.gates = map[string]<-chan struct{}{"endpointslices": gate}
	src := newSource(t, Config{Client: spy, Namespaces: []string{ns}, Options: Options{StartupTimeout: 100 * time.Millisecond}})
	rec := run(t, src)
	first := rec.wait(t, "the partial snapshot", func(registry.Snapshot) bool { return true })
	if len(first.Zones) != 0 {
		t.Errorf("partial snapshot zones = %q, want none (no NXDOMAIN before the sync)", first.Zones)
	}
	// Whether the partial snapshot has the service depends on whether the
	// Service list beat the timeout, which a loaded machine decides.
	close(gate)
	last := rec.wait(t, "the zone after the sync", func(s registry.Snapshot) bool { return slices.Equal(s.Zones, []string{"cluster.local"}) })
	if _, ok := find(last, "web."+ns+".svc.cluster.local"); !ok {
		t.Errorf("synced snapshot lacks the service")
	}
}
