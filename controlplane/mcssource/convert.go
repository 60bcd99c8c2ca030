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
//     import's IPs, SRV with its named ports (no IP yet: no name);
//   - a Headless import: <svc>.<ns>.svc.<zone> answers with the ready
//     endpoints of every cluster, SRV with the slices' named ports
//     pointing at each endpoint; each endpoint also answers as
//     <hostname>.<clusterid>.<svc>.<ns>.svc.<zone> (its dashed IP when it
//     has no hostname, as CoreDNS names it).
//
// The name table's endpoints are single labels, so the main entry names
// its endpoints by dashed IP (two clusters may both have a web-0) and each
// exporting cluster gets an entry <clusterid>.<svc>.<ns>... whose
// endpoints are its own.
//
// No ShortName: clusterset names are asked in full (no search list holds
// the zone), and svc.ns must stay the cluster-local service.
func buildEntries(imp *serviceImport, eps []*endpointSlice, zone string) []registry.Entry {
	base := imp.meta.Name + "." + imp.meta.Namespace + ".svc." + zone
	main := registry.Entry{Entry: nametable.Entry{Hostname: base, Registry: RegistryName}}
	if !imp.headless {
		if len(imp.ips) == 0 {
			return nil // no VIP allocated yet: no name
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
			// The cluster id becomes a DNS label: a slice with anything
			// else keeps only the service-level dashed-IP names rather
			// than failing the table. A hostname that is not a label is
			// named by its dashed IP, as one without.
			if !isLabel(s.cluster) {
				continue
			}
			host := ep.hostname
			if !isLabel(host) {
				host = ""
			}
			hosts := byCluster[s.cluster]
			if hosts == nil {
				hosts = map[string][]netip.Addr{}
				byCluster[s.cluster] = hosts
			}
			for _, a := range ep.addrs {
				if !slices.Contains(hosts[host], a) {
					hosts[host] = append(hosts[host], a)
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
			if h != "" {
				e.Endpoints = append(e.Endpoints, nametable.Endpoint{Hostname: h, IPs: ips})
				continue
			}
			for _, a := range ips { // dashed-IP names, one per address
				e.Endpoints = append(e.Endpoints, nametable.Endpoint{IPs: []netip.Addr{a}})
			}
		}
		slices.SortFunc(e.Endpoints, func(a, b nametable.Endpoint) int {
			return cmp.Or(strings.Compare(a.Hostname, b.Hostname), a.IPs[0].Compare(b.IPs[0]))
		})
		out = append(out, e)
	}
	return out
}

// isLabel reports whether s is an RFC 1123 label, as the MCS API requires
// of a cluster id and Kubernetes of an endpoint hostname.
func isLabel(s string) bool { return len(validation.IsDNS1123Label(s)) == 0 }
