package kube

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/nodezone"
	"github.com/meshdns/meshdns/e2e/internal/kubestack"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

// TestPodZoneOrdersAnswers: a control plane that verifies its agent's
// pod-bound token learns the pod's node from it and the zone from the
// node's label, and the agent, over gRPC, answers a headless service with
// the endpoints of its zone first, rotating among them. Relabelling the
// node moves the group; EndpointSlice hints decide over zones; an agent
// started with --zone-aware=false answers in the table's order.
func TestPodZoneOrdersAnswers(t *testing.T) {
	c := cluster.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ns := c.Namespace(t, "zone")
	node, token := c.PodOnNode(t, ns, "client-0", map[string]string{nodezone.Label: "zone-a"}, "meshdns")
	nodes := c.Client.CoreV1().Nodes()

	// db: two endpoints in zone-a, two in zone-b, one without a zone.
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "db"},
		Spec:       corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone, Ports: []corev1.ServicePort{{Name: "pg", Port: 5432}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	zoneOf := map[string]string{"10.30.0.1": "zone-b", "10.30.0.2": "zone-a", "10.30.0.3": "", "10.30.0.4": "zone-b", "10.30.0.5": "zone-a"}
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: "db-1", Labels: map[string]string{discoveryv1.LabelServiceName: "db"}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	for _, ip := range []string{"10.30.0.1", "10.30.0.2", "10.30.0.3", "10.30.0.4", "10.30.0.5"} {
		ep := discoveryv1.Endpoint{Addresses: []string{ip}}
		if z := zoneOf[ip]; z != "" {
			ep.Zone = &z
		}
		s.Endpoints = append(s.Endpoints, ep)
	}
	slicesAPI := c.Client.DiscoveryV1().EndpointSlices(ns)
	s, err := slicesAPI.Create(ctx, s, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	dnsAddr := startZoneStack(t, c, ns, token, true)
	name := "db." + ns + ".svc.cluster.local."
	// The table's order is by address; each zone's group keeps it.
	groupA := []string{"10.30.0.2", "10.30.0.5"}
	groupB := []string{"10.30.0.1", "10.30.0.4"}
	awaitGroup(t, dnsAddr, name, groupA)

	patch := `{"metadata":{"labels":{"` + nodezone.Label + `":"zone-b"}}}`
	if _, err := nodes.Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitGroup(t, dnsAddr, name, groupB)

	// Hints: only 10.30.0.3 (no zone) and 10.30.0.5 (zone-a) serve
	// zone-b.
	for i := range s.Endpoints {
		serves := "zone-a"
		if ip := s.Endpoints[i].Addresses[0]; ip == "10.30.0.3" || ip == "10.30.0.5" {
			serves = "zone-b"
		}
		s.Endpoints[i].Hints = &discoveryv1.EndpointHints{ForZones: []discoveryv1.ForZone{{Name: serves}}}
	}
	if _, err := slicesAPI.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	awaitGroup(t, dnsAddr, name, []string{"10.30.0.3", "10.30.0.5"})

	// Turned off, the same pod's agent answers in the table's order:
	// every endpoint takes its turn first.
	off := startZoneStack(t, c, ns, token, false)
	firsts := map[string]bool{}
	for len(firsts) < len(zoneOf) {
		got := askA(t, off, name)
		if len(got) == len(zoneOf) {
			firsts[got[0]] = true
		}
	}
}

// awaitGroup asks name until its answers lead with a rotation of group
// (each of group first at least once) followed by the other endpoints in
// the table's order, 40 answers in a row.
func awaitGroup(t *testing.T, dnsAddr, name string, group []string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	var got []string
	for ok := 0; ok < 40; {
		if time.Now().After(deadline) {
			t.Fatalf("%s: answers %v, want %v first", name, got, group)
		}
		got = askA(t, dnsAddr, name)
		if len(got) != 5 || !leads(got, group) {
			ok = 0
			time.Sleep(10 * time.Millisecond)
			continue
		}
		ok++
	}
	firsts := map[string]bool{}
	for len(firsts) < len(group) {
		got = askA(t, dnsAddr, name)
		if !leads(got, group) {
			t.Fatalf("%s: answers %v, want %v first", name, got, group)
		}
		firsts[got[0]] = true
	}
}

// leads reports whether got starts with the members of group and lists
// the rest in address order.
func leads(got, group []string) bool {
	head := slices.Clone(got[:len(group)])
	slices.Sort(head)
	if !slices.Equal(head, group) {
		return false
	}
	return slices.IsSorted(got[len(group):])
}

// askA returns the addresses of an A answer for name, in order.
func askA(t *testing.T, dnsAddr, name string) []string {
	t.Helper()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	cl := &dns.Client{Net: "udp", Timeout: 2 * time.Second}
	var r *dns.Msg
	var err error
	for range 3 {
		if r, _, err = cl.Exchange(m, dnsAddr); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var out []string
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			out = append(out, a.A.String())
		}
	}
	return out
}

// startZoneStack runs a control plane serving gRPC over TLS that verifies
// agents with TokenReview and sends each its node's zone, and the agent
// of pod client-0 in ns presenting token; it returns the agent's DNS
// address.
func startZoneStack(t *testing.T, c *kubetest.Cluster, ns, token string, zoneAware bool) string {
	t.Helper()
	rv, err := auth.NewReviewer(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ta, err := auth.TokenReview(auth.TokenReviewConfig{Reviewer: rv})
	if err != nil {
		t.Fatal(err)
	}
	lw, err := nodezone.ListerWatcher(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	zones, err := nodezone.New(nodezone.Config{Nodes: lw, Logger: kubestack.Logger()})
	if err != nil {
		t.Fatal(err)
	}
	return kubestack.StartWith(t, c, ns, "127.0.0.1:1", kubestack.Options{
		Namespaces: []string{ns}, Token: token, Authenticator: ta, IgnorePodZone: !zoneAware,
		SettingsParts: []agentsettings.Part{zones},
	}).DNS
}
