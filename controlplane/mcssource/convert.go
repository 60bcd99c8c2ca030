package mcssource

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/pkg/nametable"
)

// RegistryName is the nametable.Entry.Registry of every entry from this
// source.
const RegistryName = "KubernetesMCS"

// buildEntries turns one ServiceImport and the EndpointSlices labelled
// with its name into entries, following the MCS API's DNS specification
// (KEP-1645, "DNS"):
//
//   - a ClusterSetIP import: <svc>.<ns>.svc.<zone> answers with the
//     import's IPs, SRV with its named ports;
//   - a Headless import: <svc>.<ns>.svc.<zone> answers with the ready
//     endpoints of every cluster, SRV with the slices' named ports
//     pointing at each endpoint; an endpoint with a hostname also answers
//     as <hostname>.<clusterid>.<svc>.<ns>.svc.<zone>.
//
// The name table's endpoints are single labels, so the main entry names
// its endpoints by dashed IP (two clusters may both have a web-0) and each
// exporting cluster with hostnames gets an entry <clusterid>.<svc>.<ns>...
// whose endpoints are those hostnames.
//
// No ShortName: clusterset names are asked in full (no search list holds
// the zone), and svc.ns must stay the cluster-local service.
func buildEntries(imp *serviceImport, eps []*endpointSlice, zone string) []registry.Entry {
	base := imp.meta.Name + "." + imp.meta.Namespace + ".svc." + zone
	main := registry.Entry{Entry: nametable.Entry{Hostname: base, Registry: RegistryName}}
	if !imp.headless {
		if len(imp.ips) == 0 {
			return nil // no VIP allocated yet: no record
		}
		main.IPs = imp.ips
		main.Ports = imp.ports
		return []registry.Entry{main}
	}
	slices.SortFunc(eps, func(a, b *endpointSlice) int {
		return cmp.Or(strings.Compare(a.cluster, b.cluster), strings.Compare(a.meta.Name, b.meta.Name))
	})
	seen := map[netip.Addr]bool{}
	byCluster := map[string]map[string][]netip.Addr{} // cluster -> hostname -> IPs
	for _, s := range eps {
		main.Ports = append(main.Ports, s.ports...)
		for _, ep := range s.endpoints {
			for _, a := range ep.addrs {
				if !seen[a] {
					seen[a] = true
					main.Endpoints = append(main.Endpoints, nametable.Endpoint{IPs: []netip.Addr{a}})
				}
			}
			// Both become DNS labels; anything else keeps only the
			// dashed-IP name rather than failing the table.
			if !isLabel(ep.hostname) || !isLabel(s.cluster) {
				continue
			}
			hosts := byCluster[s.cluster]
			if hosts == nil {
				hosts = map[string][]netip.Addr{}
				byCluster[s.cluster] = hosts
			}
			for _, a := range ep.addrs {
				if !slices.Contains(hosts[ep.hostname], a) {
					hosts[ep.hostname] = append(hosts[ep.hostname], a)
				}
			}
		}
	}
	main.Ports = sortPorts(main.Ports)
	if len(main.Ports) == 0 {
		main.Ports = imp.ports
	}
	slices.SortFunc(main.Endpoints, func(a, b nametable.Endpoint) int { return a.IPs[0].Compare(b.IPs[0]) })
	out := []registry.Entry{main}
	clusters := make([]string, 0, len(byCluster))
	for c := range byCluster {
		clusters = append(clusters, c)
	}
	slices.Sort(clusters)
	for _, c := range clusters {
		e := registry.Entry{Entry: nametable.Entry{Hostname: c + "." + base, Registry: RegistryName, Ports: main.Ports}}
		for h, ips := range byCluster[c] {
			slices.SortFunc(ips, netip.Addr.Compare)
			e.Endpoints = append(e.Endpoints, nametable.Endpoint{Hostname: h, IPs: ips})
		}
		slices.SortFunc(e.Endpoints, func(a, b nametable.Endpoint) int { return strings.Compare(a.Hostname, b.Hostname) })
		out = append(out, e)
	}
	return out
}

// isLabel reports whether s is an RFC 1123 label, as the MCS API requires
// of a cluster id and Kubernetes of an endpoint hostname.
func isLabel(s string) bool { return len(validation.IsDNS1123Label(s)) == 0 }
