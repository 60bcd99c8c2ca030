package view

import (
	"net/netip"
	"testing"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// FuzzEncode checks the view's responses, read with the generated code:
// for any two small tables, the full table decodes to the version's table
// and base + delta decodes to the target (the encoder itself is fuzzed
// against the generated code in internal/namewire).
func FuzzEncode(f *testing.F) {
	// Seeds: a plain change, a removal with a zone change, long names
	// (multi-byte lengths), and empty strings.
	f.Add("a.x", "b.x", []byte{10, 0, 0, 1}, "ns", "x", uint16(80))
	f.Add("a.x", "a.x", []byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, "", "", uint16(0))
	f.Add(string(make([]byte, 300)), "é.x", []byte{}, "team-a", "zone.with.a.long.name", uint16(65535))
	f.Fuzz(func(t *testing.T, h1, h2 string, ip []byte, ns, zone string, port uint16) {
		if !utf8.ValidString(h1) || !utf8.ValidString(h2) || !utf8.ValidString(zone) || !utf8.ValidString(ns) {
			return // the registry drops such names before they reach a view
		}
		var ips []netip.Addr
		if a, ok := netip.AddrFromSlice(ip); ok {
			ips = append(ips, a)
		}
		e := func(h string, p uint16) registry.Entry {
			return registry.Entry{Entry: nametable.Entry{Hostname: h, IPs: ips, Registry: "File",
				Ports: []nametable.Port{{Name: ns, Port: p, Protocol: "TCP"}}}}
		}
		m1 := model(t, 1, []string{zone}, e(h1, port), e("fixed.x", 1))
		m2 := model(t, 2, nil, e(h2, port+1))
		s := newStore(t, Config{})
		s.Apply(m1)
		view := s.Subscribe(Key{Namespace: "n"}, nil).View()
		v1 := view.Current()
		s.Apply(m2)
		v2 := view.Current()
		for _, v := range []*Version{v1, v2} {
			r := decode(t, v.Full())
			if !proto.Equal(r.GetFull(), v.Table()) || r.GetVersionInfo() != v.ID {
				t.Fatalf("full table of %s decodes to %v", v.ID, r)
			}
		}
		if v1 == v2 {
			return
		}
		r := decode(t, view.Response(v1.ID, v2))
		got := v1.Table()
		for k, ni := range r.GetDelta().GetUpserted() {
			got.Table[k] = ni
		}
		for _, k := range r.GetDelta().GetRemoved() {
			delete(got.Table, k)
		}
		if zs := r.GetDelta().GetAuthoritativeZones(); zs != nil {
			got.AuthoritativeZones = zs.GetZones()
		}
		want := v2.Table()
		if len(want.AuthoritativeZones) == 0 {
			want.AuthoritativeZones = nil
		}
		if len(got.AuthoritativeZones) == 0 {
			got.AuthoritativeZones = nil
		}
		if !proto.Equal(want, got) {
			t.Fatalf("base + delta = %v, want %v", got, want)
		}
	})
}
