package node

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshdns/meshdns/controlplane/nodezone"
	"github.com/meshdns/meshdns/internal/testkit/nodetest"
)

// testPodZone labels the node with a zone and runs an injected pod that
// asks a headless service's A record every 50 ms: the endpoints in the
// node's zone lead every answer, each first in turn, the others after
// them in the table's order. The zone travels from the node's label
// through the control plane (the agent's token names its node) to the
// sidecar's settings.
func testPodZone(t *testing.T, e *env) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs := e.c.Client
	patch := `{"metadata":{"labels":{"` + nodezone.Label + `":"zone-a"}}}`
	if _, err := cs.CoreV1().Nodes().Patch(ctx, nodetest.NodeName, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	// The parts after this one run on an unzoned node, as before.
	defer func() {
		unlabel := `{"metadata":{"labels":{"` + nodezone.Label + `":null}}}`
		_, _ = cs.CoreV1().Nodes().Patch(context.Background(), nodetest.NodeName, types.MergePatchType, []byte(unlabel), metav1.PatchOptions{})
	}()
	const ns, name = "demo", "zoned"
	if _, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.ServiceSpec{ClusterIP: corev1.ClusterIPNone,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ready := true
	s := &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: name + "-1", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
		AddressType: discoveryv1.AddressTypeIPv4,
	}
	zoneOf := map[string]string{"10.244.9.1": "zone-b", "10.244.9.2": "zone-a", "10.244.9.3": "zone-b", "10.244.9.4": "zone-a"}
	for _, ip := range []string{"10.244.9.1", "10.244.9.2", "10.244.9.3", "10.244.9.4"} {
		z := zoneOf[ip]
		s.Endpoints = append(s.Endpoints, discoveryv1.Endpoint{Addresses: []string{ip}, Zone: &z,
			Conditions: discoveryv1.EndpointConditions{Ready: &ready}})
	}
	if _, err := cs.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const pod, q = "zoneapp", "=zoned.demo.svc.cluster.local."
	p := appPod(pod, nil)
	p.Spec.Containers[0].Args = []string{"-every", "50ms", q}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cs.CoreV1().Pods(ns).Delete(context.Background(), pod, metav1.DeleteOptions{}) }()

	// Once the zone reached the sidecar, 40 answers in a row lead with
	// zone-a's endpoints, each of them first at least once.
	group, rest := []string{"10.244.9.2", "10.244.9.4"}, []string{"10.244.9.1", "10.244.9.3"}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var run, lastBad int
		firsts := map[string]bool{}
		var last string
		for _, r := range e.results(ns, pod) {
			if r.name != q {
				continue
			}
			last = r.out
			addrs, ok := strings.CutPrefix(r.out, "ok ")
			got := strings.Split(addrs, ",")
			if !ok || len(got) != 4 || !sameSet(got[:2], group) || !slices.Equal(got[2:], rest) {
				run, lastBad = 0, lastBad+1
				firsts = map[string]bool{}
				continue
			}
			run++
			firsts[got[0]] = true
		}
		if run >= 40 && len(firsts) == len(group) {
			t.Logf("%d answers in a row led by the node zone's endpoints (%d before the zone arrived)", run, lastBad)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d answers in a row led by %v (firsts %v), want 40 with each first; last %q", q, run, group, firsts, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// sameSet reports whether a and b hold the same strings.
func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
