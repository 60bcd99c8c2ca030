package kubesource

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// EndpointSlices written with zones and hints, as the EndpointSlice
// controller writes them under topology-aware routing, reach the model
// through the real API server; a change of hints alone is a change.
func TestAPIServerEndpointZones(t *testing.T) {
	c := cluster.Get(t)
	ns := c.Namespace(t, "zones")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, headlessService(ns, "db"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	s := slice(ns, "db-1", "db", discoveryv1.AddressTypeIPv4,
		ep{addrs: []string{"10.0.0.1"}}, ep{addrs: []string{"10.0.0.2"}, hostname: "db-2"}, ep{addrs: []string{"10.0.0.3"}})
	s.Endpoints[0].Zone = ptr("zone-a")
	s.Endpoints[1].Zone = ptr("zone-b")
	s.Endpoints[0].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-a"}, {Name: "zone-c"}}}
	slices := c.Client.DiscoveryV1().EndpointSlices(ns)
	created, err := slices.Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	src := newSource(t, Config{Client: restClientFor(t, c.Config), Namespaces: []string{ns}})
	rec := run(t, src)
	host := "db." + ns + ".svc.cluster.local"
	endpointsOf := func(s registry.Snapshot) []nametable.Endpoint {
		e, _ := find(s, host)
		return e.Endpoints
	}
	want := []nametable.Endpoint{
		{IPs: addrs("10.0.0.1"), Zone: "zone-a", ForZones: []string{"zone-a", "zone-c"}},
		{IPs: addrs("10.0.0.3")},
		{Hostname: "db-2", IPs: addrs("10.0.0.2"), Zone: "zone-b"},
	}
	got := rec.wait(t, "the service's endpoints", func(s registry.Snapshot) bool { return len(endpointsOf(s)) == 3 })
	if diff := cmp.Diff(want, endpointsOf(got), entryOpts()); diff != "" {
		t.Fatalf("endpoints (-want +got):\n%s", diff)
	}
	// The proto the agents get carries them.
	e, _ := find(got, host)
	pe := registry.ToNameInfo(e.Entry).GetEndpoints()[0]
	if pe.GetZone() != "zone-a" || !cmp.Equal(pe.GetForZones(), []string{"zone-a", "zone-c"}) {
		t.Errorf("wire endpoint %v, want zone-a for zone-a and zone-c", pe)
	}

	// New hints on the same endpoints: a snapshot with them.
	created.Endpoints[2].Zone = ptr("zone-c")
	created.Endpoints[0].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: "zone-b"}}}
	if _, err := slices.Update(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want[0].ForZones, want[1].Zone = []string{"zone-b"}, "zone-c"
	rec.wait(t, "the new hints", func(s registry.Snapshot) bool { return cmp.Equal(want, endpointsOf(s), entryOpts()) })
}
