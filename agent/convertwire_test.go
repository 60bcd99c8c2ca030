package agent

import (
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/agent/discovery"
	"github.com/meshdns/meshdns/pkg/nametable"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// The zones may come before the names (one pass), after them (the control
// plane's order: a skim, then a build) or between them: the table is the
// same, with both zones.
func TestBuildWireZoneOrder(t *testing.T) {
	info, err := proto.Marshal(&meshdnsv1.NameInfo{Ips: []string{"10.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	entry := func(host string) []byte {
		e := protowire.AppendTag(nil, 1, protowire.BytesType)
		e = protowire.AppendString(e, host)
		e = protowire.AppendTag(e, 2, protowire.BytesType)
		e = protowire.AppendBytes(e, info)
		b := protowire.AppendTag(nil, 1, protowire.BytesType)
		return protowire.AppendBytes(b, e)
	}
	zone := func(z string) []byte {
		b := protowire.AppendTag(nil, 2, protowire.BytesType)
		return protowire.AppendString(b, z)
	}
	cat := func(parts ...[]byte) []byte {
		var out []byte
		for _, p := range parts {
			out = append(out, p...)
		}
		return out
	}
	a, b := entry("a.example.org"), entry("b.example.com")
	zo, zc := zone("example.org"), zone("example.com")
	tests := []struct {
		name string
		wire []byte
	}{
		{name: "zones first", wire: cat(zo, zc, a, b)},
		{name: "zones last", wire: cat(a, b, zo, zc)},
		{name: "zones between", wire: cat(zo, a, zc, b)},
	}
	pod := nametable.Context{Namespace: "demo"}
	var want []string
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			walk := func(n func(string, []byte) error, z func(string) error) error {
				return discovery.EachName(tt.wire, n, z)
			}
			tbl, n, err := buildWire(walk, Limits{}, pod)
			if err != nil {
				t.Fatal(err)
			}
			if n != 2 {
				t.Errorf("%d names, want 2", n)
			}
			zones := tbl.Zones()
			slices.Sort(zones)
			if diff := cmp.Diff([]string{"example.com", "example.org"}, zones); diff != "" {
				t.Errorf("zones (-want +got):\n%s", diff)
			}
			if want == nil {
				want = tbl.Names()
				return
			}
			if diff := cmp.Diff(want, tbl.Names()); diff != "" {
				t.Errorf("names (-zones first +%s):\n%s", tt.name, diff)
			}
		})
	}
}
