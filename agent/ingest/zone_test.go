package ingest

import (
	"testing"

	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// zonedNames is names with the headless service db.demo, one endpoint in
// zone a (10.1.0.1) and one in b (10.1.0.2).
func zonedNames() *meshdnsv1.NameTable {
	nt := names(3, 0, "cluster.local")
	nt.Table["db.demo.svc.cluster.local"] = &meshdnsv1.NameInfo{Registry: "Kubernetes", Shortname: "db", Namespace: "demo",
		Endpoints: []*meshdnsv1.Endpoint{{Ips: []string{"10.1.0.1"}, Zone: "a"}, {Ips: []string{"10.1.0.2"}, Zone: "b"}}}
	return nt
}

// firstA is the first address of db.demo's A answer and its zone group.
func firstA(t *testing.T, w *world) (string, int) {
	t.Helper()
	res := w.in.Current().Table.Lookup(dns.Question{Name: "db.demo.svc.cluster.local.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
	if len(res.Answer) != 2 {
		t.Fatalf("%d answers, want 2", len(res.Answer))
	}
	return res.Answer[0].(*dns.A).A.String(), res.Local
}

// The pod zone of a version's settings orders its table; a version that
// changes only the zone (the control plane's delta for a relabelled
// node) is built again with it, and served with it in one store.
func TestPodZoneOrdersTheTable(t *testing.T) {
	w := newWorld(t)
	steps := []struct {
		id, zone  string
		wantFirst string
		wantLocal int
	}{
		{id: "v1", zone: "", wantFirst: "10.1.0.1"},
		{id: "v2", zone: "b", wantFirst: "10.1.0.2", wantLocal: 1},
		{id: "v3", zone: "a", wantFirst: "10.1.0.1", wantLocal: 1},
		{id: "v4", zone: "c", wantFirst: "10.1.0.1"},
	}
	for _, s := range steps {
		v := settingsVersion{protoVersion(t, s.id, zonedNames()), &namewire.AgentSettings{PodZone: s.zone}}
		if err := w.in.Apply(SourceControlPlane, v); err != nil {
			t.Fatalf("%s: %v", s.id, err)
		}
		if cur := w.in.Current(); cur.Version != s.id || cur.Table.LocalZone() != s.zone {
			t.Fatalf("serving %s built for zone %q, want %s for %q", cur.Version, cur.Table.LocalZone(), s.id, s.zone)
		}
		if first, local := firstA(t, w); first != s.wantFirst || local != s.wantLocal {
			t.Errorf("%s (zone %q): first %s, group %d; want %s, %d", s.id, s.zone, first, local, s.wantFirst, s.wantLocal)
		}
	}
	if got := w.applies()[strategyBuild]; got != 4 {
		t.Errorf("%d whole builds, want 4 (each version changed the zone)", got)
	}
	// The same zone again with a changed name: a patch, still ordered.
	nt := zonedNames()
	nt.Table["extra.example.org"] = &meshdnsv1.NameInfo{Ips: []string{"10.9.0.1"}}
	if err := w.in.Apply(SourceControlPlane, settingsVersion{protoVersion(t, "v5", nt), &namewire.AgentSettings{PodZone: "c"}}); err != nil {
		t.Fatal(err)
	}
	if got := w.applies()[strategyPatch]; got != 1 {
		t.Errorf("%d patches, want 1", got)
	}
}

// IgnorePodZone builds every table in the table's order.
func TestIgnorePodZone(t *testing.T) {
	w := newWorld(t)
	w.in.cfg.IgnorePodZone = true
	v := settingsVersion{protoVersion(t, "v1", zonedNames()), &namewire.AgentSettings{PodZone: "b"}}
	if err := w.in.Apply(SourceControlPlane, v); err != nil {
		t.Fatal(err)
	}
	if first, local := firstA(t, w); first != "10.1.0.1" || local != 0 || w.in.Current().Table.LocalZone() != "" {
		t.Errorf("first %s, group %d, zone %q; want 10.1.0.1 in the table's order", first, local, w.in.Current().Table.LocalZone())
	}
}
