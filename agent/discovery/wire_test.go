package discovery

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

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
			out, err := applyDeltaWire(wire, tt.delta)
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
