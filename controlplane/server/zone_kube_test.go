package server_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/controlplane/nodezone"
	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

// TestPodZoneAPIServer: an agent whose pod-bound token names its node
// (the API server's node-name claim) gets its node's zone label as
// pod_zone, and relabelling the node sends it a new version.
func TestPodZoneAPIServer(t *testing.T) {
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ns := c.Namespace(t, "zone")
	node, token := c.PodOnNode(t, ns, "web", map[string]string{nodezone.Label: "zone-a"}, "meshdns")
	rv, err := auth.NewReviewer(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	ta, err := auth.TokenReview(auth.TokenReviewConfig{Reviewer: rv})
	if err != nil {
		t.Fatal(err)
	}
	id, err := ta.Authenticate(ctx, auth.Request{Token: token})
	if err != nil || id.Node != node {
		t.Fatalf("identity %+v, %v: want node %q from the token's node-name claim", id, err, node)
	}

	lw, err := nodezone.ListerWatcher(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	zones, err := nodezone.New(nodezone.Config{Nodes: lw})
	if err != nil {
		t.Fatal(err)
	}
	zctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- zones.Run(zctx) }()
	t.Cleanup(func() { stop(); <-done })
	waitFor(t, "the node's zone known", func() bool { return zones.Zone(node) == "zone-a" })

	h := newHarness(t, harnessOpts{server: func(cfg *server.Config) {
		cfg.Authenticator = ta
		cfg.Settings = agentsettings.Compose(zones)
	}})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: ns, Pod: "web", Token: token,
		Features: []string{agentsettings.FeaturePodZone}})
	if r := a.Next(); cptest.Kind(r) != "full" || a.Settings.GetPodZone() != "zone-a" {
		t.Fatalf("first response %s with settings %v, want a full table with pod_zone zone-a", cptest.Kind(r), a.Settings)
	}
	first := a.Version
	if !strings.Contains(first, "+") {
		t.Errorf("version %q names no settings", first)
	}

	// A relabelled node: a delta with the new zone, no name changes.
	patch := `{"metadata":{"labels":{"` + nodezone.Label + `":"zone-b"}}}`
	if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	r := a.Next()
	if cptest.Kind(r) != "delta" || len(r.GetDelta().GetUpserted()) != 0 || a.Settings.GetPodZone() != "zone-b" || a.Version == first {
		t.Fatalf("after relabelling got %s, zone %q, version %q (was %q): want a delta to zone-b and a new version",
			cptest.Kind(r), a.Settings.GetPodZone(), a.Version, first)
	}
	// A node update that leaves the zone alone sends nothing: the next
	// response is that of the next zone change.
	for _, labels := range []string{`"unrelated":"x"`, `"` + nodezone.Label + `":"zone-c"`} {
		patch := `{"metadata":{"labels":{` + labels + `}}}`
		if _, err := c.Client.CoreV1().Nodes().Patch(ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if r := a.Next(); cptest.Kind(r) != "delta" || a.Settings.GetPodZone() != "zone-c" {
		t.Fatalf("got %s with zone %q, want the delta to zone-c", cptest.Kind(r), a.Settings.GetPodZone())
	}
	if got := h.metric(t, "meshdns_controlplane_settings_changes_total"); got != 2 {
		t.Errorf("settings changes %v, want 2 (zone-b, zone-c)", got)
	}
}
