package discovery

import (
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
