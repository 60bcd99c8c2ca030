package registry

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/meshdns/meshdns/pkg/nametable"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

func TestToNameInfo(t *testing.T) {
	tests := []struct {
		name string
		in   nametable.Entry
		want *meshdnsv1.NameInfo
	}{
		{
			name: "kubernetes service",
			in: nametable.Entry{Hostname: "web.shop.svc.cluster.local", Registry: "Kubernetes", ShortName: "web", Namespace: "shop",
				IPs:   []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("::ffff:10.96.0.11"), netip.MustParseAddr("fd00::a")},
				Ports: []nametable.Port{{Name: "http", Port: 80, Protocol: "TCP"}}, TTL: 5},
			want: &meshdnsv1.NameInfo{Registry: "Kubernetes", Shortname: "web", Namespace: "shop",
				Ips:   []string{"10.96.0.10", "10.96.0.11", "fd00::a"},
				Ports: []*meshdnsv1.Port{{Name: "http", Port: 80, Protocol: "TCP"}}, Ttl: 5},
		},
		{
			name: "headless with endpoints",
			in: nametable.Entry{Registry: "Kubernetes", Endpoints: []nametable.Endpoint{
				{Hostname: "db-0", IPs: []netip.Addr{netip.MustParseAddr("10.0.0.5")}}, {IPs: []netip.Addr{netip.MustParseAddr("10.0.0.6")}}}},
			want: &meshdnsv1.NameInfo{Registry: "Kubernetes", Endpoints: []*meshdnsv1.Endpoint{
				{Hostname: "db-0", Ips: []string{"10.0.0.5"}}, {Ips: []string{"10.0.0.6"}}}},
		},
		{
			name: "endpoint zones and hints",
			in: nametable.Entry{Registry: "Kubernetes", Endpoints: []nametable.Endpoint{
				{IPs: []netip.Addr{netip.MustParseAddr("10.0.0.5")}, Zone: "a", ForZones: []string{"a", "b"}},
				{IPs: []netip.Addr{netip.MustParseAddr("10.0.0.6")}, Zone: "b"}}},
			want: &meshdnsv1.NameInfo{Registry: "Kubernetes", Endpoints: []*meshdnsv1.Endpoint{
				{Ips: []string{"10.0.0.5"}, Zone: "a", ForZones: []string{"a", "b"}}, {Ips: []string{"10.0.0.6"}, Zone: "b"}}},
		},
		{
			name: "external name and aliases lose trailing dots",
			in:   nametable.Entry{Registry: "File", CanonicalName: "example.com.", AltHosts: []string{"a.x.", "b.x"}},
			want: &meshdnsv1.NameInfo{Registry: "File", CanonicalName: "example.com", AltHosts: []string{"a.x", "b.x"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, ToNameInfo(tc.in), protocmp.Transform()); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// FuzzToNameInfo builds entries from arbitrary strings and bytes and checks
// that the converter's output survives the wire and keeps every address.
func FuzzToNameInfo(f *testing.F) {
	// Seeds: a plain v4 service, a v6 headless endpoint, invalid UTF-8.
	f.Add("web.ns.svc.cluster.local", "web", "ns", []byte{10, 0, 0, 1}, "http", uint16(80), "ep-0", "")
	f.Add("*.corp.example", "", "", []byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, "", uint16(0), "", "target.example.")
	f.Add("\xff\xfe", "\xc3", "", []byte{}, "p", uint16(65535), "\xff", "\xff.")
	f.Fuzz(func(t *testing.T, host, short, ns string, ipBytes []byte, port string, num uint16, epHost, cname string) {
		var ips []netip.Addr
		for len(ipBytes) >= 4 {
			if len(ipBytes) >= 16 {
				ips = append(ips, netip.AddrFrom16([16]byte(ipBytes[:16])))
				ipBytes = ipBytes[16:]
				continue
			}
			ips = append(ips, netip.AddrFrom4([4]byte(ipBytes[:4])))
			ipBytes = ipBytes[4:]
		}
		e := nametable.Entry{Hostname: host, ShortName: short, Namespace: ns, IPs: ips, Registry: "File",
			Ports:         []nametable.Port{{Name: port, Port: num, Protocol: "TCP"}},
			Endpoints:     []nametable.Endpoint{{Hostname: epHost, IPs: ips}},
			CanonicalName: cname, AltHosts: []string{host}}
		ni := ToNameInfo(e)
		if len(ni.GetIps()) != len(ips) {
			t.Fatalf("%d ips from %d", len(ni.GetIps()), len(ips))
		}
		for i, s := range ni.GetIps() {
			got, err := netip.ParseAddr(s)
			if err != nil || got != ips[i].Unmap() {
				t.Fatalf("ip %q from %v", s, ips[i])
			}
		}
		b, err := deterministic.Marshal(ni)
		if err != nil {
			// Invalid UTF-8 in a string field: the registry drops the
			// entry (newCandidate fails) instead of sending it.
			if _, cerr := newCandidate("file", Entry{Entry: e}); cerr == nil {
				t.Fatal("newCandidate accepted what Marshal rejects")
			}
			return
		}
		back := &meshdnsv1.NameInfo{}
		if err := proto.Unmarshal(b, back); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(ni, back) {
			t.Fatalf("round trip: %v -> %v", ni, back)
		}
	})
}
