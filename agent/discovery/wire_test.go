package discovery

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// A delta applied in wire form gives the table the same delta applied to
// decoded messages would.
func TestApplyDeltaWire(t *testing.T) {
	base := &meshdnsv1.NameTable{
		AuthoritativeZones: []string{"cluster.local"},
		Table: map[string]*meshdnsv1.NameInfo{
			"a.example": {Ips: []string{"10.0.0.1"}},
			"b.example": {Ips: []string{"10.0.0.2"}, Ports: []*meshdnsv1.Port{{Name: "http", Port: 80}}},
			"c.example": {CanonicalName: "x.example"},
			"e.example": {},
		},
	}
	tests := []struct {
		name  string
		delta *meshdnsv1.NameTableDelta
		want  *meshdnsv1.NameTable
	}{
		{
			name:  "empty",
			delta: &meshdnsv1.NameTableDelta{},
			want:  base,
		},
		{
			name: "upsert, replace and remove",
			delta: &meshdnsv1.NameTableDelta{
				Upserted: map[string]*meshdnsv1.NameInfo{"a.example": {Ips: []string{"10.0.0.9"}}, "d.example": {Ips: []string{"fd00::1"}}},
				Removed:  []string{"c.example", "missing.example"},
			},
			want: &meshdnsv1.NameTable{
				AuthoritativeZones: []string{"cluster.local"},
				Table: map[string]*meshdnsv1.NameInfo{
					"a.example": {Ips: []string{"10.0.0.9"}},
					"b.example": base.Table["b.example"],
					"d.example": {Ips: []string{"fd00::1"}},
					"e.example": {},
				},
			},
		},
		{
			name:  "new zones",
			delta: &meshdnsv1.NameTableDelta{AuthoritativeZones: &meshdnsv1.ZoneSet{Zones: []string{"example", "cluster.local"}}},
			want:  &meshdnsv1.NameTable{AuthoritativeZones: []string{"example", "cluster.local"}, Table: base.Table},
		},
		{
			name:  "zones emptied",
			delta: &meshdnsv1.NameTableDelta{AuthoritativeZones: &meshdnsv1.ZoneSet{}},
			want:  &meshdnsv1.NameTable{Table: base.Table},
		},
	}
	wire, err := proto.Marshal(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := proto.Marshal(tt.delta)
			if err != nil {
				t.Fatal(err)
			}
			d, err := namewire.UnmarshalDelta(b)
			if err != nil {
				t.Fatal(err)
			}
			out, err := applyDeltaWire(wire, d)
			if err != nil {
				t.Fatal(err)
			}
			got := new(meshdnsv1.NameTable)
			if err := proto.Unmarshal(out, got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got, protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// EachName sees every name and zone of a table, and fails on a cut one.
func TestEachName(t *testing.T) {
	wire, err := proto.Marshal(&meshdnsv1.NameTable{
		AuthoritativeZones: []string{"cluster.local", "example"},
		Table:              map[string]*meshdnsv1.NameInfo{"a.example": {Ips: []string{"10.0.0.1"}}, "b.example": nil},
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	var zones []string
	err = EachName(wire, func(host string, info []byte) error {
		var ni meshdnsv1.NameInfo
		if err := proto.Unmarshal(info, &ni); err != nil {
			return err
		}
		got[host] = ni.String()
		return nil
	}, func(z string) error { zones = append(zones, z); return nil })
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a.example": (&meshdnsv1.NameInfo{Ips: []string{"10.0.0.1"}}).String(), "b.example": ""}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("names (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"cluster.local", "example"}, zones); diff != "" {
		t.Errorf("zones (-want +got):\n%s", diff)
	}
	if err := EachName(wire[:len(wire)-3], func(string, []byte) error { return nil }, func(string) error { return nil }); err == nil {
		t.Error("a cut table parsed")
	}
}

// A raw response parses to what proto would decode, with the full table
// left in wire form.
func TestParseResponse(t *testing.T) {
	tbl := &meshdnsv1.NameTable{Table: map[string]*meshdnsv1.NameInfo{"a.example": {Ips: []string{"10.0.0.1"}}}}
	fullResp, err := proto.Marshal(full("v1", "n1", tbl))
	if err != nil {
		t.Fatal(err)
	}
	r, err := parseResponse(fullResp)
	if err != nil {
		t.Fatal(err)
	}
	got := new(meshdnsv1.NameTable)
	if err := proto.Unmarshal(r.full, got); err != nil {
		t.Fatal(err)
	}
	if r.version != "v1" || r.nonce != "n1" || !r.isFull || r.delta != nil {
		t.Errorf("full response parsed as %+v", r)
	}
	if diff := cmp.Diff(tbl, got, protocmp.Transform()); diff != "" {
		t.Errorf("full table (-want +got):\n%s", diff)
	}

	deltaResp, err := proto.Marshal(delta("v2", "n2", "v1", []string{"b.example"}, []string{"a.example"}))
	if err != nil {
		t.Fatal(err)
	}
	r, err = parseResponse(deltaResp)
	if err != nil {
		t.Fatal(err)
	}
	if r.version != "v2" || r.isFull || r.delta.BaseVersion != "v1" || len(r.delta.Upserted) != 1 || r.delta.Removed[0] != "a.example" {
		t.Errorf("delta response parsed as %+v", r)
	}
	// Oneof: the last of full and delta wins, as in proto.
	r, err = parseResponse(append(append([]byte(nil), deltaResp...), fullResp...))
	if err != nil || !r.isFull || r.delta != nil || r.version != "v1" {
		t.Errorf("delta then full parsed as %+v, %v", r, err)
	}
	if _, err := parseResponse(fullResp[:len(fullResp)-2]); err == nil {
		t.Error("a cut response parsed")
	}
}

// A full table that changes little of the base is a change of the names
// that differ; one that changes more than hashdiff.MaxPatchShare of them is staged,
// and its walks then hand over every name of both tables (the stages
// replace every entry, holding nothing per name of what changed).
func TestDiffSmallAndStaged(t *testing.T) {
	var names []string
	for i := range 12 {
		names = append(names, fmt.Sprintf("n%02d.example", i))
	}
	wire := func(changed int) rawTable {
		nt := table(names...)
		for _, n := range names[:changed] {
			nt.Table[n].Ips = []string{"10.9.9.9"}
		}
		b, err := proto.Marshal(nt)
		if err != nil {
			t.Fatal(err)
		}
		return memRaw(b)
	}
	walk := func(w func(func(string, []byte) error) error) []string {
		var got []string
		if err := w(func(host string, _ []byte) error { got = append(got, strings.Clone(host)); return nil }); err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		return got
	}
	base := wire(0)

	c, ok, err := diff(base, wire(2))
	if err != nil || !ok {
		t.Fatalf("2 of 12 changed: ok %v, err %v", ok, err)
	}
	var added []string
	for _, n := range c.New {
		added = append(added, n.Host)
	}
	slices.Sort(added)
	if c.Next != nil || c.Names != 12 || !slices.Equal(walk(c.Old), names[:2]) || !slices.Equal(added, names[:2]) {
		t.Errorf("2 of 12 changed: Next set %v, Names %d, Old %v, New %v; want a patch of %v", c.Next != nil, c.Names, walk(c.Old), added, names[:2])
	}

	c, ok, err = diff(base, wire(5))
	if err != nil || !ok {
		t.Fatalf("5 of 12 changed: ok %v, err %v", ok, err)
	}
	if c.Next == nil || c.New != nil || c.Names != 12 {
		t.Fatalf("5 of 12 changed: Next set %v, New %d, Names %d; want staged", c.Next != nil, len(c.New), c.Names)
	}
	for range 2 { // walked once per stage
		if got := walk(c.Old); !slices.Equal(got, names) {
			t.Errorf("staged Old walks %v, want every name", got)
		}
		if got := walk(c.Next); !slices.Equal(got, names) {
			t.Errorf("staged Next walks %v, want every name", got)
		}
	}
}
