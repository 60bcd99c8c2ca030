package view

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/pkg/nametable"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// model builds a registry model with candidates made as the registry makes
// them (ToNameInfo, deterministic encoding, a 64-bit hash), without the
// registry's goroutine and debounce.
func model(t testing.TB, version uint64, zones []string, entries ...registry.Entry) *registry.Model {
	t.Helper()
	m := &registry.Model{Version: version, Names: map[string][]*registry.Candidate{}, Zones: zones}
	for _, e := range entries {
		info := registry.ToNameInfo(e.Entry)
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(info)
		if err != nil {
			t.Fatal(err)
		}
		var h uint64
		for _, c := range b {
			h = h*1099511628211 ^ uint64(c)
		}
		host := registry.CanonicalHost(e.Hostname)
		m.Names[host] = append(m.Names[host], &registry.Candidate{Source: "test", Info: info, Bytes: b, Hash: h, Namespaces: e.Namespaces})
	}
	return m
}

func ent(host, ip string, ns ...string) registry.Entry {
	return registry.Entry{Entry: nametable.Entry{Hostname: host, IPs: []netip.Addr{netip.MustParseAddr(ip)}, Registry: "File"}, Namespaces: ns}
}

func newStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func decode(t testing.TB, p *Prepared) *meshdnsv1.StreamNameTableResponse {
	t.Helper()
	r := &meshdnsv1.StreamNameTableResponse{}
	if err := proto.Unmarshal(p.Bytes, r); err != nil {
		t.Fatalf("hand-encoded response does not decode: %v", err)
	}
	return r
}

// TestEncoding checks the hand encoder against the generated types.
func TestEncoding(t *testing.T) {
	s := newStore(t, Config{})
	m1 := model(t, 1, []string{"x"}, ent("a.x", "10.0.0.1"), ent("b.x", "fd00::2"), ent("c.x", "10.0.0.3"))
	s.Apply(m1)
	sub := s.Subscribe(Key{Namespace: "ns"}, nil)
	v1 := sub.View().Current()
	m2 := model(t, 2, []string{"x", "y"}, ent("a.x", "10.0.0.1"), ent("b.x", "fd00::20"), ent("d.x", "10.0.0.4"))
	m2.Names["a.x"] = m1.Names["a.x"] // unchanged entries share candidates
	s.Apply(m2)
	v2 := sub.View().Current()

	tests := []struct {
		name string
		p    *Prepared
		want *meshdnsv1.StreamNameTableResponse
	}{
		{
			name: "full",
			p:    v1.Full(),
			want: &meshdnsv1.StreamNameTableResponse{VersionInfo: v1.ID, Update: &meshdnsv1.StreamNameTableResponse_Full{Full: &meshdnsv1.NameTable{
				Table: map[string]*meshdnsv1.NameInfo{
					"a.x": {Ips: []string{"10.0.0.1"}, Registry: "File"},
					"b.x": {Ips: []string{"fd00::2"}, Registry: "File"},
					"c.x": {Ips: []string{"10.0.0.3"}, Registry: "File"},
				},
				AuthoritativeZones: []string{"x"},
			}}},
		},
		{
			name: "delta with zones",
			p:    sub.View().Response(v1.ID, v2),
			want: &meshdnsv1.StreamNameTableResponse{VersionInfo: v2.ID, Update: &meshdnsv1.StreamNameTableResponse_Delta{Delta: &meshdnsv1.NameTableDelta{
				BaseVersion: v1.ID,
				Upserted: map[string]*meshdnsv1.NameInfo{
					"b.x": {Ips: []string{"fd00::20"}, Registry: "File"},
					"d.x": {Ips: []string{"10.0.0.4"}, Registry: "File"},
				},
				Removed:            []string{"c.x"},
				AuthoritativeZones: &meshdnsv1.ZoneSet{Zones: []string{"x", "y"}},
			}}},
		},
		{
			name: "empty delta",
			p:    sub.View().Response(v2.ID, v2),
			want: &meshdnsv1.StreamNameTableResponse{VersionInfo: v2.ID, Update: &meshdnsv1.StreamNameTableResponse_Delta{Delta: &meshdnsv1.NameTableDelta{
				BaseVersion: v2.ID,
			}}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, decode(t, tc.p), protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
	if sub.View().Response(v1.ID, v2) != sub.View().Response(v1.ID, v2) || v1.Full() != v1.Full() {
		t.Error("a response was encoded twice")
	}
}

// TestVersionIDs: IDs are content hashes, equal across stores (replicas)
// and independent of model numbering; a change nobody in the view can see
// makes no new version.
func TestVersionIDs(t *testing.T) {
	a, b := newStore(t, Config{}), newStore(t, Config{})
	a.Apply(model(t, 1, nil, ent("a.x", "10.0.0.1"), ent("s.x", "10.0.0.2", "team-a")))
	b.Apply(model(t, 7, nil, ent("s.x", "10.0.0.2", "team-a"), ent("a.x", "10.0.0.1")))
	woken := 0
	ka, kb := a.Subscribe(Key{Namespace: "team-b"}, func() { woken++ }), b.Subscribe(Key{Namespace: "team-b"}, nil)
	if ka.View().Current().ID != kb.View().Current().ID {
		t.Errorf("replicas disagree: %s vs %s", ka.View().Current().ID, kb.View().Current().ID)
	}
	before := ka.View().Current()
	a.Apply(model(t, 2, nil, ent("a.x", "10.0.0.1"), ent("s.x", "10.0.0.99", "team-a")))
	if got := ka.View().Current(); got != before {
		t.Errorf("team-b got version %s for a change only team-a sees", got.ID)
	}
	if woken != 0 {
		t.Errorf("team-b's subscriber was woken %d times for a change it cannot see", woken)
	}
	ta := a.Subscribe(Key{Namespace: "team-a"}, nil)
	if ta.View().Current().ID == before.ID {
		t.Error("team-a and team-b views share an ID but differ")
	}
}

func TestClusterDomainRewrite(t *testing.T) {
	s := newStore(t, Config{ClusterDomain: "cluster.local"})
	s.Apply(model(t, 1, []string{"cluster.local", "corp.example"}, ent("web.shop.svc.cluster.local", "10.0.0.1"), ent("api.corp.example", "10.0.0.2")))
	tests := []struct {
		name   string
		domain string
		names  []string
		zones  []string
	}{
		{name: "same domain", domain: "", names: []string{"api.corp.example", "web.shop.svc.cluster.local"}, zones: []string{"cluster.local", "corp.example"}},
		{name: "other domain", domain: "Edge.Local.", names: []string{"api.corp.example", "web.shop.svc.edge.local"}, zones: []string{"corp.example", "edge.local"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := s.Subscribe(Key{Namespace: "shop", ClusterDomain: tc.domain}, nil).View().Current()
			if diff := cmp.Diff(tc.names, v.sortedNames()); diff != "" {
				t.Errorf("names (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.zones, v.Zones); diff != "" {
				t.Errorf("zones (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHistory(t *testing.T) {
	s := newStore(t, Config{History: 3})
	s.Apply(model(t, 1, nil, ent("a.x", "10.0.0.1")))
	woken := 0
	sub := s.Subscribe(Key{Namespace: "ns"}, func() { woken++ })
	first := sub.View().Current()
	for i := 2; i <= 6; i++ {
		s.Apply(model(t, uint64(i), nil, ent("a.x", fmt.Sprintf("10.0.0.%d", i))))
	}
	if woken != 5 {
		t.Errorf("subscriber woken %d times for 5 versions", woken)
	}
	cur := sub.View().Current()
	if p := sub.View().Response(first.ID, cur); p.Kind != "full" {
		t.Errorf("version out of the history got a %s", p.Kind)
	}
	if got := len(sub.View().steps); got != 3 {
		t.Errorf("history holds %d versions, want 3", got)
	}
	prev := sub.View().steps[0].id
	if p := sub.View().Response(prev, cur); p.Kind != "delta" || p.Upserted != 1 {
		t.Errorf("got %s with %d upserted, want a delta of 1", p.Kind, p.Upserted)
	}
}

func TestIdleViewsExpire(t *testing.T) {
	now := time.Unix(1000, 0)
	s := newStore(t, Config{IdleTTL: time.Minute, Now: func() time.Time { return now }})
	s.Apply(model(t, 1, nil, ent("a.x", "10.0.0.1")))
	sub := s.Subscribe(Key{Namespace: "gone"}, nil)
	sub.Close()
	sub.Close() // idempotent
	sub.View().idleSince = now
	now = now.Add(30 * time.Second)
	s.Apply(model(t, 2, nil, ent("a.x", "10.0.0.2")))
	if s.Lookup(Key{Namespace: "gone"}) == nil {
		t.Fatal("view dropped before IdleTTL")
	}
	now = now.Add(time.Minute)
	s.Apply(model(t, 3, nil, ent("a.x", "10.0.0.3")))
	if s.Lookup(Key{Namespace: "gone"}) != nil {
		t.Error("idle view kept after IdleTTL")
	}
}

func bigModel(b testing.TB, n int, version uint64, changed string) *registry.Model {
	es := make([]registry.Entry, n)
	for i := range es {
		ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		if i == 0 {
			ip = changed
		}
		es[i] = ent(fmt.Sprintf("svc%d.corp.example", i), ip)
	}
	return model(b, version, []string{"corp.example"}, es...)
}

// BenchmarkBuild10k: building one view version of 10,000 names.
func BenchmarkBuild10k(b *testing.B) {
	m := bigModel(b, 10000, 1, "10.200.0.0")
	b.ReportAllocs()
	for b.Loop() {
		build(m, Key{Namespace: "ns"}, "cluster.local", time.Time{})
	}
}

// BenchmarkFull10k: encoding a full table of 10,000 names (once per view
// version).
func BenchmarkFull10k(b *testing.B) {
	m := bigModel(b, 10000, 1, "10.200.0.0")
	enc, _ := newEncoder(nopRegisterer{})
	b.ReportAllocs()
	for b.Loop() {
		v := build(m, Key{Namespace: "ns"}, "cluster.local", time.Time{})
		v.enc = enc
		v.Full()
	}
}

// BenchmarkDelta10k: a new version of a 10,000-name view with one name
// changed: build it, log the step, and encode the delta.
func BenchmarkDelta10k(b *testing.B) {
	m1 := bigModel(b, 10000, 1, "10.200.0.0")
	m2 := &registry.Model{Version: 2, Names: map[string][]*registry.Candidate{}, Zones: m1.Zones}
	for k, v := range m1.Names {
		m2.Names[k] = v
	}
	m2.Names["svc0.corp.example"] = model(b, 2, nil, ent("svc0.corp.example", "10.200.0.1")).Names["svc0.corp.example"]
	enc, _ := newEncoder(nopRegisterer{})
	v1 := build(m1, Key{Namespace: "ns"}, "cluster.local", time.Time{})
	b.ReportAllocs()
	for b.Loop() {
		v := &View{enc: enc, steps: []*step{{id: v1.ID, zones: v1.Zones}}}
		v.cur.Store(v1)
		v2 := build(m2, Key{Namespace: "ns"}, "cluster.local", time.Time{})
		v.advance(v2, nil, 16)
		if p := v.Response(v1.ID, v2); p.Upserted != 1 {
			b.Fatal(p.Upserted)
		}
	}
}

// TestComposedDeltas checks deltas across several steps against the
// tables they connect: apply the delta to the base table and compare with
// the target table.
func TestComposedDeltas(t *testing.T) {
	tables := [][]registry.Entry{
		{ent("a.x", "10.0.0.1"), ent("b.x", "10.0.0.2"), ent("c.x", "10.0.0.3")},
		{ent("a.x", "10.0.0.1"), ent("b.x", "10.0.0.20")},                                 // change b, remove c
		{ent("a.x", "10.0.0.1"), ent("b.x", "10.0.0.2"), ent("d.x", "10.0.0.4")},          // b back, add d
		{ent("a.x", "10.0.0.9"), ent("c.x", "10.0.0.3"), ent("d.x", "10.0.0.4")},          // change a, c back, remove b
		{ent("a.x", "10.0.0.9"), ent("c.x", "10.0.0.3"), ent("d.x", "10.0.0.4", "other")}, // d hidden
	}
	s := newStore(t, Config{})
	var versions []*Version
	var view *View
	for i, es := range tables {
		m := model(t, uint64(i+1), []string{"x"}, es...)
		// Share unchanged candidates with the previous model, as the
		// registry does.
		if i > 0 {
			for k, cs := range m.Names {
				if prev, ok := s.model.Names[k]; ok && string(prev[0].Bytes) == string(cs[0].Bytes) && len(cs[0].Namespaces) == 0 {
					m.Names[k] = prev
				}
			}
		}
		s.Apply(m)
		if view == nil {
			view = s.Subscribe(Key{Namespace: "ns"}, nil).View()
		}
		versions = append(versions, view.Current())
	}
	toMap := func(v *Version) map[string]string {
		out := map[string]string{}
		for k, c := range v.Names() {
			out[k] = c.Info.GetIps()[0]
		}
		return out
	}
	for i := range versions {
		for j := i + 1; j < len(versions); j++ {
			t.Run(fmt.Sprintf("%d to %d", i, j), func(t *testing.T) {
				r := decode(t, view.Response(versions[i].ID, versions[j]))
				d := r.GetDelta()
				if d == nil {
					t.Fatalf("got %v, want a delta", r)
				}
				got := toMap(versions[i])
				for k, ni := range d.GetUpserted() {
					got[k] = ni.GetIps()[0]
				}
				for _, k := range d.GetRemoved() {
					delete(got, k)
				}
				if diff := cmp.Diff(toMap(versions[j]), got); diff != "" {
					t.Errorf("base + delta (-target +got):\n%s", diff)
				}
			})
		}
	}
}
