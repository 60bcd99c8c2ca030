package mcssource

import (
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/pkg/nametable"
)

func addrs(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = netip.MustParseAddr(s)
	}
	return out
}

func TestBuildEntries(t *testing.T) {
	http := []nametable.Port{{Name: "http", Port: 80, Protocol: "TCP"}}
	meta := metav1.ObjectMeta{Name: "web", Namespace: "shop"}
	const base = "web.shop.svc.clusterset.local"
	entry := func(host string) registry.Entry {
		return registry.Entry{Entry: nametable.Entry{Hostname: host, Registry: RegistryName}}
	}
	tests := []struct {
		name string
		imp  *serviceImport
		eps  []*endpointSlice
		want []registry.Entry
	}{
		{
			name: "ClusterSetIP",
			imp:  &serviceImport{meta: meta, ips: addrs("10.0.0.1"), ports: http},
			want: []registry.Entry{func() registry.Entry {
				e := entry(base)
				e.IPs, e.Ports = addrs("10.0.0.1"), http
				return e
			}()},
		},
		{
			name: "ClusterSetIP without an IP yet",
			imp:  &serviceImport{meta: meta, ports: http},
		},
		{
			name: "Headless without slices keeps the import's ports",
			imp:  &serviceImport{meta: meta, headless: true, ports: http},
			want: []registry.Entry{func() registry.Entry { e := entry(base); e.Ports = http; return e }()},
		},
		{
			name: "Headless across clusters, hostnames per cluster, bad labels skipped",
			imp:  &serviceImport{meta: meta, headless: true, ports: http},
			eps: []*endpointSlice{
				{cluster: "west", ports: []nametable.Port{{Name: "web", Port: 8080, Protocol: "TCP"}},
					endpoints: []endpoint{{hostname: "web-0", addrs: addrs("10.2.0.1")}, {addrs: addrs("10.2.0.2")}}},
				{cluster: "east", endpoints: []endpoint{{hostname: "web-0", addrs: addrs("10.1.0.1", "fd00::1")}}},
				{cluster: "not_a_label", endpoints: []endpoint{{hostname: "web-0", addrs: addrs("10.3.0.1")}}},
			},
			want: func() []registry.Entry {
				ports := []nametable.Port{{Name: "web", Port: 8080, Protocol: "TCP"}}
				main := entry(base)
				main.Ports = ports
				for _, a := range addrs("10.1.0.1", "10.2.0.1", "10.2.0.2", "10.3.0.1", "fd00::1") {
					main.Endpoints = append(main.Endpoints, nametable.Endpoint{IPs: []netip.Addr{a}})
				}
				east, west := entry("east."+base), entry("west."+base)
				east.Ports, west.Ports = ports, ports
				east.Endpoints = []nametable.Endpoint{{Hostname: "web-0", IPs: addrs("10.1.0.1", "fd00::1")}}
				west.Endpoints = []nametable.Endpoint{{IPs: addrs("10.2.0.2")}, {Hostname: "web-0", IPs: addrs("10.2.0.1")}}
				return []registry.Entry{main, east, west}
			}(),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := buildEntries(tt.imp, tt.eps, "clusterset.local")
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty(), cmpopts.EquateComparable(netip.Addr{})); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
		})
	}
}
