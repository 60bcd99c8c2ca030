package agent

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/agent/discovery"
	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/nametable"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// A replacement first hands the DNS server the table it serves again (which
// starts it on an empty answer cache, so the old cache is garbage before
// the build rather than beside it), then the new table; a rejected one
// leaves the old table served.
func TestBuildDropsAnswersFirst(t *testing.T) {
	m, err := newMetrics(meshmetrics.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var published []*nametable.Table
	ts := &tables{pod: nametable.Context{Namespace: "demo"}, m: m, now: time.Now,
		publish: func(t *nametable.Table) { published = append(published, t) }}
	nt := func(ip string) *namewire.NameTable {
		return &namewire.NameTable{Table: map[string]*namewire.NameInfo{"a.example": {IPs: []string{ip}}}}
	}
	if err := ts.apply(sourceControlPlane, "v1", nt("10.0.0.1")); err != nil {
		t.Fatal(err)
	}
	first := ts.current().Table
	if len(published) != 1 || published[0] != first {
		t.Fatalf("first table: published %v, want only the table", published)
	}
	if err := ts.apply(sourceControlPlane, "v2", nt("10.0.0.2")); err != nil {
		t.Fatal(err)
	}
	second := ts.current().Table
	if len(published) != 3 || published[1] != first || published[2] != second {
		t.Fatalf("replacement: published %v, want the old table again, then the new", published)
	}
	if err := ts.apply(sourceControlPlane, "v3", nt("bad")); err == nil {
		t.Fatal("a bad address was applied")
	}
	if ts.current().Table != second || published[len(published)-1] != second {
		t.Errorf("after a rejected table the served table changed")
	}
}

// A delta patches the table being served (the patched table shares its
// storage: the removed name shows as garbage) and answers as the whole new
// table built from scratch would; when the zones change, or the change
// does not fit the table served, the new table is built whole.
func TestApplyWireDeltaPatches(t *testing.T) {
	m, err := newMetrics(meshmetrics.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ts := &tables{pod: nametable.Context{Namespace: "demo"}, m: m, now: time.Now, publish: func(*nametable.Table) {}}
	info := func(ip string) *meshdnsv1.NameInfo { return &meshdnsv1.NameInfo{Ips: []string{ip}} }
	wire := func(t *testing.T, names map[string]*meshdnsv1.NameInfo) discovery.WireTable {
		t.Helper()
		b, err := proto.Marshal(&meshdnsv1.NameTable{Table: names, AuthoritativeZones: []string{"example.org"}})
		if err != nil {
			t.Fatal(err)
		}
		return func(n func(string, []byte) error, z func(string) error) error { return discovery.EachName(b, n, z) }
	}
	base := map[string]*meshdnsv1.NameInfo{"a.example.org": info("10.0.0.1"), "b.example.org": info("10.0.0.2"), "c.example.org": info("10.0.0.3")}
	next := map[string]*meshdnsv1.NameInfo{"a.example.org": info("10.0.0.1"), "c.example.org": info("10.0.0.9"), "d.example.org": info("10.0.0.4")}
	// old walks base's entries of the named hosts.
	old := func(t *testing.T, hosts ...string) func(func(string, []byte) error) error {
		return func(name func(string, []byte) error) error {
			for _, h := range hosts {
				b, err := proto.Marshal(base[h])
				if err != nil {
					t.Fatal(err)
				}
				if err := name(h, b); err != nil {
					return err
				}
			}
			return nil
		}
	}
	// news are next's entries of the named hosts, as a delta holds them.
	news := func(t *testing.T, hosts ...string) []namewire.RawName {
		var out []namewire.RawName
		for _, h := range hosts {
			b, err := proto.Marshal(next[h])
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, namewire.RawName{Host: h, Info: b})
		}
		return out
	}
	want, _, err := buildWire(wire(t, next), Limits{}, ts.pod)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		change  discovery.Change
		patched bool
	}{
		{name: "patched", patched: true, change: discovery.Change{Names: -1,
			Old: old(t, "b.example.org", "c.example.org"),
			New: news(t, "c.example.org", "d.example.org"),
		}},
		{name: "zones changed: built whole", change: discovery.Change{Names: -1,
			Old: old(t, "b.example.org", "c.example.org"), ZonesChanged: true,
			New: news(t, "c.example.org", "d.example.org"),
		}},
		{name: "a patch to another number of names than the table's: built whole", change: discovery.Change{Names: 7,
			Old: old(t, "b.example.org", "c.example.org"),
			New: news(t, "c.example.org", "d.example.org"),
		}},
		{name: "a change not of this table: built whole", change: discovery.Change{Names: -1,
			Old: old(t, "b.example.org"), // c is replaced but not removed: defined twice
			New: news(t, "c.example.org", "d.example.org"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := ts.applyWire(sourceControlPlane, "v1", wire(t, base), nil); err != nil {
				t.Fatal(err)
			}
			change := func() (discovery.Change, bool, error) { return tt.change, true, nil }
			if err := ts.applyWireDelta(sourceControlPlane, "v2", wire(t, next), change, nil); err != nil {
				t.Fatal(err)
			}
			cur := ts.current()
			if diff := cmp.Diff(want.Names(), cur.Table.Names()); diff != "" {
				t.Errorf("names (-built whole +applied):\n%s", diff)
			}
			if cur.Names != 3 || cur.Version != "v2" {
				t.Errorf("served %d names at %s, want 3 at v2", cur.Names, cur.Version)
			}
			res := cur.Table.Lookup(dns.Question{Name: "c.example.org.", Qtype: dns.TypeA, Qclass: dns.ClassINET})
			if len(res.Answer) != 1 || res.Answer[0].(*dns.A).A.String() != "10.0.0.9" {
				t.Errorf("c.example.org A = %v, want 10.0.0.9", res.Answer)
			}
			if res := cur.Table.Lookup(dns.Question{Name: "b.example.org.", Qtype: dns.TypeA, Qclass: dns.ClassINET}); res.Rcode != dns.RcodeNameError {
				t.Errorf("removed b.example.org: rcode %d, want NXDOMAIN", res.Rcode)
			}
			if patched := cur.Table.Garbage() > 0; patched != tt.patched {
				t.Errorf("patched = %v (garbage %.2f), want %v", patched, cur.Table.Garbage(), tt.patched)
			}
		})
	}
}
