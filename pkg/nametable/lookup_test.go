package nametable

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

const (
	soaCluster = "cluster.local. 30 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 30"
	soaReverse = "10.in-addr.arpa. 30 IN SOA ns.dns.10.in-addr.arpa. hostmaster.10.in-addr.arpa. 1 7200 1800 86400 30"
)

func TestLookup(t *testing.T) {
	table := newFixture(t)
	nxdomain := func(soa string) view {
		return view{Action: Answer, Rcode: dns.RcodeNameError, Ns: rrs(t, soa)}
	}
	nodata := func(soa string) view {
		return view{Action: Answer, Ns: rrs(t, soa)}
	}
	answer := func(lines ...string) view {
		return view{Action: Answer, Answer: rrs(t, lines...)}
	}
	forward := view{Action: Forward}
	webSRVExtra := rrs(t, "web.demo.svc.cluster.local. 30 IN A 10.3.0.10", "web.demo.svc.cluster.local. 30 IN AAAA fd00::10")
	headlessExtra := rrs(t,
		"my-pet.headless.default.svc.cluster.local. 30 IN A 10.3.0.100",
		"10-3-0-101.headless.default.svc.cluster.local. 30 IN A 10.3.0.101",
		"fd00--3.headless.default.svc.cluster.local. 30 IN AAAA fd00::3")

	tests := []struct {
		name  string
		qname string
		qtype uint16
		want  view
	}{
		// Kubernetes DNS specification examples.
		{
			name: "spec: A of a ClusterIP service", qname: "kubernetes.default.svc.cluster.local.", qtype: dns.TypeA,
			want: answer("kubernetes.default.svc.cluster.local. 30 IN A 10.3.0.1"),
		},
		{
			name: "spec: SRV of a named port with the service A record as additional", qname: "_https._tcp.kubernetes.default.svc.cluster.local.", qtype: dns.TypeSRV,
			want: view{
				Action: Answer,
				Answer: rrs(t, "_https._tcp.kubernetes.default.svc.cluster.local. 30 IN SRV 0 100 443 kubernetes.default.svc.cluster.local."),
				Extra:  rrs(t, "kubernetes.default.svc.cluster.local. 30 IN A 10.3.0.1"),
			},
		},
		{
			name: "spec: PTR of a service IP", qname: "1.0.3.10.in-addr.arpa.", qtype: dns.TypePTR,
			want: answer("1.0.3.10.in-addr.arpa. 30 IN PTR kubernetes.default.svc.cluster.local."),
		},
		{
			name: "spec: headless service A is every ready endpoint", qname: "headless.default.svc.cluster.local.", qtype: dns.TypeA,
			want: answer("headless.default.svc.cluster.local. 30 IN A 10.3.0.100", "headless.default.svc.cluster.local. 30 IN A 10.3.0.101"),
		},
		{
			name: "spec: headless endpoint hostname", qname: "my-pet.headless.default.svc.cluster.local.", qtype: dns.TypeA,
			want: answer("my-pet.headless.default.svc.cluster.local. 30 IN A 10.3.0.100"),
		},
		{
			name: "spec: headless SRV has one target per endpoint with their addresses as additional", qname: "_https._tcp.headless.default.svc.cluster.local.", qtype: dns.TypeSRV,
			want: view{
				Action: Answer,
				Answer: rrs(t,
					"_https._tcp.headless.default.svc.cluster.local. 30 IN SRV 0 33 443 my-pet.headless.default.svc.cluster.local.",
					"_https._tcp.headless.default.svc.cluster.local. 30 IN SRV 0 33 443 10-3-0-101.headless.default.svc.cluster.local.",
					"_https._tcp.headless.default.svc.cluster.local. 30 IN SRV 0 33 443 fd00--3.headless.default.svc.cluster.local."),
				Extra: headlessExtra,
			},
		},
		{
			name: "spec: PTR of a headless endpoint is its hostname", qname: "100.0.3.10.in-addr.arpa.", qtype: dns.TypePTR,
			want: answer("100.0.3.10.in-addr.arpa. 30 IN PTR my-pet.headless.default.svc.cluster.local."),
		},
		{
			name: "spec: dns-version TXT", qname: "dns-version.cluster.local.", qtype: dns.TypeTXT,
			want: answer(`dns-version.cluster.local. 3600 IN TXT "1.1.0"`), // the schema version: a long TTL
		},
		{
			name: "spec: ExternalName is a CNAME chased upstream", qname: "ext.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Answer: rrs(t, "ext.demo.svc.cluster.local. 30 IN CNAME example.com."), Chase: "example.com."},
		},

		{
			name: "spec: CNAME question on an ExternalName is its CNAME, not chased", qname: "ext.demo.svc.cluster.local.", qtype: dns.TypeCNAME,
			want: answer("ext.demo.svc.cluster.local. 30 IN CNAME example.com."),
		},

		// Case and spelling.
		{
			name: "matching ignores case", qname: "KuBeRnEtEs.Default.SVC.Cluster.Local.", qtype: dns.TypeA,
			want: answer("KuBeRnEtEs.Default.SVC.Cluster.Local. 30 IN A 10.3.0.1"),
		},
		{
			name: "a name without the trailing dot is the same name", qname: "kubernetes.default.svc.cluster.local", qtype: dns.TypeA,
			want: answer("kubernetes.default.svc.cluster.local. 30 IN A 10.3.0.1"),
		},

		// Address families and negative answers.
		{
			name: "AAAA of a dual-stack service", qname: "web.demo.svc.cluster.local.", qtype: dns.TypeAAAA,
			want: answer("web.demo.svc.cluster.local. 30 IN AAAA fd00::10"),
		},
		{
			name: "NODATA for a known name without the asked family", qname: "kubernetes.default.svc.cluster.local.", qtype: dns.TypeAAAA,
			want: nodata(soaCluster),
		},
		{
			name: "NODATA for a type the name lacks", qname: "kubernetes.default.svc.cluster.local.", qtype: dns.TypeMX,
			want: nodata(soaCluster),
		},
		{
			name: "NODATA for an unknown type number", qname: "kubernetes.default.svc.cluster.local.", qtype: 65280,
			want: nodata(soaCluster),
		},
		{
			name: "NXDOMAIN for an unknown name inside an authoritative zone", qname: "nope.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: nxdomain(soaCluster),
		},
		{
			name: "NXDOMAIN for the ndots walk of an external name", qname: "google.com.demo.svc.cluster.local.", qtype: dns.TypeAAAA,
			want: nxdomain(soaCluster),
		},
		{
			name: "forward a name outside every zone", qname: "google.com.", qtype: dns.TypeA,
			want: forward,
		},
		{
			name: "forward a root question", qname: ".", qtype: dns.TypeNS,
			want: forward,
		},
		{
			name: "forward a question of another class", qname: "kubernetes.default.svc.cluster.local.", qtype: dns.TypeA,
			want: forward, // class set below by name
		},
		// Names no table can hold (dns.Msg presents the bytes as escapes):
		// inside a zone they cannot exist.
		{
			name: "NXDOMAIN for an escaped dot inside a zone", qname: `kubernetes\.default.svc.cluster.local.`, qtype: dns.TypeA,
			want: nxdomain(soaCluster),
		},
		{
			name: "NXDOMAIN for a space inside a zone", qname: `web\ x.demo.svc.cluster.local.`, qtype: dns.TypeA,
			want: nxdomain(soaCluster),
		},
		{
			name: "NXDOMAIN for a NUL inside a zone", qname: `web\000.demo.svc.cluster.local.`, qtype: dns.TypeAAAA,
			want: nxdomain(soaCluster),
		},
		{
			name: "NXDOMAIN for non-ASCII inside a zone", qname: `caf\195\169.demo.svc.cluster.local.`, qtype: dns.TypeA,
			want: nxdomain(soaCluster),
		},
		{
			name: "NXDOMAIN for an escape two labels below the zone", qname: `a\ b.x.cluster.local.`, qtype: dns.TypeA,
			want: nxdomain(soaCluster),
		},
		{
			name: "NXDOMAIN for an escape in the reverse zone", qname: `x\ y.10.in-addr.arpa.`, qtype: dns.TypePTR,
			want: nxdomain(soaReverse),
		},
		{
			name: "forward an escaped name outside every zone", qname: `a\ b.google.com.`, qtype: dns.TypeA,
			want: forward,
		},
		{
			name: "forward an escape in the last label", qname: `cluster\.local.`, qtype: dns.TypeA,
			want: forward,
		},
		{
			name: "forward an escaped name under a zone-like suffix", qname: `a\ b.notcluster.local.`, qtype: dns.TypeA,
			want: forward,
		},
		{
			name: "forward a name with an empty label", qname: "a..cluster.local.", qtype: dns.TypeA,
			want: forward,
		},
		{
			name: "forward a name with a leading dot", qname: ".cluster.local.", qtype: dns.TypeA,
			want: forward,
		},
		{
			name: "forward a name with a label over 63 characters", qname: strings.Repeat("a", 64) + ".cluster.local.", qtype: dns.TypeA,
			want: forward,
		},
		{
			name: "NXDOMAIN for a 63-character label in a zone", qname: strings.Repeat("a", 63) + ".cluster.local.", qtype: dns.TypeA,
			want: nxdomain(soaCluster),
		},
		{
			name: "per-entry TTL", qname: "v6.demo.svc.cluster.local.", qtype: dns.TypeAAAA,
			want: answer("v6.demo.svc.cluster.local. 5 IN AAAA fd00::20"),
		},
		{
			name: "ANY answers one RRset (RFC 8482)", qname: "web.demo.svc.cluster.local.", qtype: dns.TypeANY,
			want: answer("web.demo.svc.cluster.local. 30 IN A 10.3.0.10"),
		},

		// Zone structure.
		{
			name: "SOA at the zone apex", qname: "cluster.local.", qtype: dns.TypeSOA,
			want: answer(soaCluster),
		},
		{
			name: "NODATA for another type at the zone apex", qname: "cluster.local.", qtype: dns.TypeA,
			want: nodata(soaCluster),
		},
		{
			name: "NODATA for SOA below the apex", qname: "kubernetes.default.svc.cluster.local.", qtype: dns.TypeSOA,
			want: nodata(soaCluster),
		},
		{
			name: "NODATA for a namespace (empty non-terminal)", qname: "demo.svc.cluster.local.", qtype: dns.TypeA,
			want: nodata(soaCluster),
		},
		{
			name: "NODATA for svc.<domain>", qname: "svc.cluster.local.", qtype: dns.TypeA,
			want: nodata(soaCluster),
		},
		{
			name: "NODATA for the protocol label of SRV owners", qname: "_tcp.web.demo.svc.cluster.local.", qtype: dns.TypeSRV,
			want: nodata(soaCluster),
		},

		// Kubernetes alternate names.
		{
			name: "svc.ns answers", qname: "kubernetes.default.", qtype: dns.TypeA,
			want: answer("kubernetes.default. 30 IN A 10.3.0.1"),
		},
		{
			name: "svc.ns.svc answers", qname: "kubernetes.default.svc.", qtype: dns.TypeA,
			want: answer("kubernetes.default.svc. 30 IN A 10.3.0.1"),
		},
		{
			name: "bare svc answers in the pod's namespace", qname: "web.", qtype: dns.TypeA,
			want: answer("web. 30 IN A 10.3.0.10"),
		},
		{
			name: "bare svc of another namespace is forwarded", qname: "kubernetes.", qtype: dns.TypeA,
			want: forward,
		},
		{
			name: "alternate names reach SRV owners", qname: "_http._tcp.web.demo.", qtype: dns.TypeSRV,
			want: view{
				Action: Answer,
				Answer: rrs(t, "_http._tcp.web.demo. 30 IN SRV 0 100 80 web.demo.svc.cluster.local."),
				Extra:  webSRVExtra,
			},
		},
		{
			name: "alternate names reach endpoint names", qname: "my-pet.headless.default.", qtype: dns.TypeA,
			want: answer("my-pet.headless.default. 30 IN A 10.3.0.100"),
		},
		{
			name: "another cluster domain answers as written", qname: "remote.demo.svc.other.local.", qtype: dns.TypeA,
			want: answer("remote.demo.svc.other.local. 30 IN A 10.9.0.1"),
		},
		{
			name: "another cluster domain: NODATA carries that domain's SOA", qname: "remote.demo.svc.other.local.", qtype: dns.TypeAAAA,
			want: nodata("other.local. 30 IN SOA ns.dns.other.local. hostmaster.other.local. 1 7200 1800 86400 30"),
		},
		{
			name: "another cluster domain has no svc.ns name", qname: "remote.demo.", qtype: dns.TypeA,
			want: forward,
		},
		{
			name: "another cluster domain has no svc.ns.svc name", qname: "remote.demo.svc.", qtype: dns.TypeA,
			want: forward,
		},
		{
			name: "file entries get no alternate names", qname: "db.corp.", qtype: dns.TypeA,
			want: forward,
		},

		// Search-path expansion.
		{
			name: "search: svc.ns under the first search domain", qname: "web.demo.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Alias: "web.demo.svc.cluster.local.", Answer: rrs(t, "web.demo.svc.cluster.local. 30 IN A 10.3.0.10")},
		},
		{
			name: "search: a stored name that ends in a search domain answers directly", qname: "kubernetes.default.svc.cluster.local.", qtype: dns.TypeA,
			want: answer("kubernetes.default.svc.cluster.local. 30 IN A 10.3.0.1"),
		},
		{
			name: "search: bare name under the second search domain", qname: "web.svc.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Alias: "web.demo.svc.cluster.local.", Answer: rrs(t, "web.demo.svc.cluster.local. 30 IN A 10.3.0.10")},
		},
		{
			name: "search: svc.ns under the third search domain", qname: "kubernetes.default.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Alias: "kubernetes.default.svc.cluster.local.", Answer: rrs(t, "kubernetes.default.svc.cluster.local. 30 IN A 10.3.0.1")},
		},
		{
			// corp.internal is the node's search domain, not a zone of the
			// table: web.corp.internal is a real outside host.
			name: "search: bare name under a non-cluster search domain is forwarded", qname: "web.corp.internal.", qtype: dns.TypeAAAA,
			want: forward,
		},
		{
			name: "search: svc.ns under a non-cluster search domain is forwarded", qname: "kubernetes.default.corp.internal.", qtype: dns.TypeA,
			want: forward,
		},
		{
			name: "search: the walk's last step under a non-cluster search domain is forwarded", qname: "web.demo.svc.cluster.local.corp.internal.", qtype: dns.TypeA,
			want: forward,
		},
		{
			name: "search: full name followed by a search domain", qname: "kubernetes.default.svc.cluster.local.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Alias: "kubernetes.default.svc.cluster.local.", Answer: rrs(t, "kubernetes.default.svc.cluster.local. 30 IN A 10.3.0.1")},
		},
		{
			name: "search: file entry followed by a cluster search domain", qname: "DB.corp.internal.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Alias: "db.corp.internal.", Answer: rrs(t, "db.corp.internal. 30 IN A 192.168.1.5")},
		},
		{
			name: "search: file entry followed by a non-cluster search domain is forwarded", qname: "DB.corp.internal.corp.internal.", qtype: dns.TypeA,
			want: forward,
		},
		{
			name: "search: alt host aliases to the entry's hostname", qname: "database.corp.internal.svc.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Alias: "db.corp.internal.", Answer: rrs(t, "db.corp.internal. 30 IN A 192.168.1.5")},
		},
		{
			name: "search: NODATA behind the alias", qname: "v6.demo.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Alias: "v6.demo.svc.cluster.local.", Ns: rrs(t, soaCluster)},
		},
		{
			name: "search: SRV behind the alias", qname: "_dns._udp.web.demo.cluster.local.", qtype: dns.TypeSRV,
			want: view{
				Action: Answer, Alias: "_dns._udp.web.demo.svc.cluster.local.",
				Answer: rrs(t, "_dns._udp.web.demo.svc.cluster.local. 30 IN SRV 0 100 53 web.demo.svc.cluster.local."),
				Extra:  webSRVExtra,
			},
		},
		{
			name: "search: ExternalName keeps the alias and chases", qname: "ext.demo.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Alias: "ext.demo.svc.cluster.local.", Answer: rrs(t, "ext.demo.svc.cluster.local. 30 IN CNAME example.com."), Chase: "example.com."},
		},
		{
			name: "search: a wildcard match aliases to the question's own spelling", qname: "Foo.Apps.Example.com.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Alias: "Foo.Apps.Example.com.", Answer: rrs(t, "Foo.Apps.Example.com. 30 IN A 10.1.1.1")},
		},
		{
			name: "search: never aliases to an empty non-terminal", qname: "svc.cluster.local.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: nxdomain(soaCluster),
		},
		{
			name: "search: unknown name under a non-cluster search domain is forwarded", qname: "printer.corp.internal.", qtype: dns.TypeA,
			want: forward,
		},

		// Wildcards.
		{
			name: "wildcard: the most specific wins", qname: "x.apps.example.com.", qtype: dns.TypeA,
			want: answer("x.apps.example.com. 30 IN A 10.1.1.1"),
		},
		{
			name: "wildcard: matches several labels deep", qname: "a.b.apps.example.com.", qtype: dns.TypeA,
			want: answer("a.b.apps.example.com. 30 IN A 10.1.1.1"),
		},
		{
			name: "wildcard: the less specific covers other names", qname: "www.example.com.", qtype: dns.TypeA,
			want: answer("www.example.com. 30 IN A 10.1.1.2"),
		},
		{
			name: "wildcard: never matches its own domain", qname: "example.com.", qtype: dns.TypeA,
			want: forward,
		},
		{
			name: "wildcard: NODATA for a missing family", qname: "www.example.com.", qtype: dns.TypeAAAA,
			want: nodata("example.com. 30 IN SOA ns.dns.example.com. hostmaster.example.com. 1 7200 1800 86400 30"),
		},
		{
			name: "wildcard: ExternalName", qname: "img.cdn.example.com.", qtype: dns.TypeA,
			want: view{Action: Answer, Answer: rrs(t, "img.cdn.example.com. 30 IN CNAME cdn.provider.net."), Chase: "cdn.provider.net."},
		},

		// SRV.
		{
			name: "SRV on the bare service name lists every port", qname: "web.demo.svc.cluster.local.", qtype: dns.TypeSRV,
			want: view{
				Action: Answer,
				Answer: rrs(t,
					"web.demo.svc.cluster.local. 30 IN SRV 0 33 80 web.demo.svc.cluster.local.",
					"web.demo.svc.cluster.local. 30 IN SRV 0 33 53 web.demo.svc.cluster.local.",
					"web.demo.svc.cluster.local. 30 IN SRV 0 33 9090 web.demo.svc.cluster.local."),
				Extra: webSRVExtra,
			},
		},
		{
			name: "SRV of a UDP port", qname: "_dns._udp.web.demo.svc.cluster.local.", qtype: dns.TypeSRV,
			want: view{
				Action: Answer,
				Answer: rrs(t, "_dns._udp.web.demo.svc.cluster.local. 30 IN SRV 0 100 53 web.demo.svc.cluster.local."),
				Extra:  webSRVExtra,
			},
		},
		{
			name: "SRV of a port under the wrong protocol is NXDOMAIN", qname: "_dns._tcp.web.demo.svc.cluster.local.", qtype: dns.TypeSRV,
			want: nxdomain(soaCluster),
		},
		{
			name: "NODATA for a protocol label used by a UDP port", qname: "_udp.web.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: nodata(soaCluster),
		},
		{
			name: "NXDOMAIN for a protocol label no port uses", qname: "_sctp.web.demo.svc.cluster.local.", qtype: dns.TypeSRV,
			want: nxdomain(soaCluster),
		},
		{
			name: "NXDOMAIN for a port name under an endpoint", qname: "_https._tcp.my-pet.headless.default.svc.cluster.local.", qtype: dns.TypeSRV,
			want: nxdomain(soaCluster),
		},
		{
			name: "SRV port names match case-insensitively", qname: "_HTTP._Tcp.Web.Demo.svc.cluster.local.", qtype: dns.TypeSRV,
			want: view{
				Action: Answer,
				Answer: rrs(t, "_HTTP._Tcp.Web.Demo.svc.cluster.local. 30 IN SRV 0 100 80 web.demo.svc.cluster.local."),
				Extra:  webSRVExtra,
			},
		},
		{
			name: "A on an SRV owner is NODATA", qname: "_http._tcp.web.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: nodata(soaCluster),
		},
		{
			name: "SRV on a headless service name lists every endpoint", qname: "headless.default.svc.cluster.local.", qtype: dns.TypeSRV,
			want: view{
				Action: Answer,
				Answer: rrs(t,
					"headless.default.svc.cluster.local. 30 IN SRV 0 33 443 my-pet.headless.default.svc.cluster.local.",
					"headless.default.svc.cluster.local. 30 IN SRV 0 33 443 10-3-0-101.headless.default.svc.cluster.local.",
					"headless.default.svc.cluster.local. 30 IN SRV 0 33 443 fd00--3.headless.default.svc.cluster.local."),
				Extra: headlessExtra,
			},
		},
		{
			name: "SRV on a name without ports is NODATA", qname: "db.corp.internal.", qtype: dns.TypeSRV,
			want: nodata("corp.internal. 30 IN SOA ns.dns.corp.internal. hostmaster.corp.internal. 1 7200 1800 86400 30"),
		},

		// Headless endpoints and PTR.
		{
			name: "headless: AAAA of the service", qname: "headless.default.svc.cluster.local.", qtype: dns.TypeAAAA,
			want: answer("headless.default.svc.cluster.local. 30 IN AAAA fd00::3"),
		},
		{
			name: "headless: dashed IPv4 name of an endpoint without hostname", qname: "10-3-0-101.headless.default.svc.cluster.local.", qtype: dns.TypeA,
			want: answer("10-3-0-101.headless.default.svc.cluster.local. 30 IN A 10.3.0.101"),
		},
		{
			name: "headless: dashed IPv6 name of an endpoint without hostname", qname: "fd00--3.headless.default.svc.cluster.local.", qtype: dns.TypeAAAA,
			want: answer("fd00--3.headless.default.svc.cluster.local. 30 IN AAAA fd00::3"),
		},
		{
			name: "PTR of a dashed endpoint", qname: "101.0.3.10.in-addr.arpa.", qtype: dns.TypePTR,
			want: answer("101.0.3.10.in-addr.arpa. 30 IN PTR 10-3-0-101.headless.default.svc.cluster.local."),
		},
		{
			name: "PTR of an IPv6 endpoint", qname: "3.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.", qtype: dns.TypePTR,
			want: answer("3.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa. 30 IN PTR fd00--3.headless.default.svc.cluster.local."),
		},
		{
			name: "PTR of an IPv6 service", qname: "0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.D.F.IP6.ARPA.", qtype: dns.TypePTR,
			want: answer("0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.D.F.IP6.ARPA. 30 IN PTR web.demo.svc.cluster.local."),
		},
		{
			name: "PTR of a file entry", qname: "5.1.168.192.in-addr.arpa.", qtype: dns.TypePTR,
			want: answer("5.1.168.192.in-addr.arpa. 30 IN PTR db.corp.internal."),
		},
		{
			name: "PTR: unknown address in an authoritative reverse zone is NXDOMAIN", qname: "99.0.3.10.in-addr.arpa.", qtype: dns.TypePTR,
			want: nxdomain(soaReverse),
		},
		{
			name: "PTR: unknown address outside the zones is forwarded", qname: "6.1.168.192.in-addr.arpa.", qtype: dns.TypePTR,
			want: forward,
		},
		{
			name: "PTR: the empty non-terminals of a reverse zone are NODATA", qname: "0.3.10.in-addr.arpa.", qtype: dns.TypePTR,
			want: nodata(soaReverse),
		},

		// Other registries.
		{
			name: "alt host answers like the hostname", qname: "DataBase.corp.internal.", qtype: dns.TypeA,
			want: answer("DataBase.corp.internal. 30 IN A 192.168.1.5"),
		},
		{
			name: "ExternalName answers any type with the chase", qname: "ext.", qtype: dns.TypeSRV,
			want: view{Action: Answer, Answer: rrs(t, "ext. 30 IN CNAME example.com."), Chase: "example.com."},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q := dns.Question{Name: tc.qname, Qtype: tc.qtype, Qclass: dns.ClassINET}
			if tc.name == "forward a question of another class" {
				q.Qclass = dns.ClassCHAOS
			}
			got := viewOf(table.Lookup(q), tc.qname)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Lookup(%s %s) mismatch (-want +got):\n%s", tc.qname, dns.TypeToString[tc.qtype], diff)
			}
		})
	}
}

func TestLookupWithoutTable(t *testing.T) {
	q := dns.Question{Name: "kubernetes.default.svc.cluster.local.", Qtype: dns.TypeA, Qclass: dns.ClassINET}
	tests := []struct {
		name  string
		table *Table
	}{
		{name: "nil table forwards", table: nil},
		{name: "zero table forwards", table: &Table{}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(view{Action: Forward}, viewOf(tc.table.Lookup(q), q.Name)); diff != "" {
				t.Errorf("mismatch (-want +got):\n%s", diff)
			}
			if tc.table.Len() != 0 || tc.table.Names() != nil && len(tc.table.Names()) != 0 {
				t.Errorf("empty table has names: %v", tc.table.Names())
			}
		})
	}
}

// TestImpossibleNameUnderWildcard: a wildcard matches any label, whatever
// its bytes (RFC 4592), so a name with an escape under a wildcard inside a
// zone is not declared nonexistent; it is forwarded as before.
func TestImpossibleNameUnderWildcard(t *testing.T) {
	table, err := New([]Entry{{Hostname: "*.w.corp.example", Registry: "File", IPs: addrs("10.1.1.1")}},
		[]string{"corp.example"}, Context{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		qname  string
		action Action
		rcode  int
	}{
		{name: "under the wildcard", qname: `a\ b.w.corp.example.`, action: Forward},
		{name: "under the wildcard, deeper", qname: `a\ b.c.w.corp.example.`, action: Forward},
		{name: "beside the wildcard", qname: `a\ b.v.corp.example.`, action: Answer, rcode: dns.RcodeNameError},
		{name: "the wildcard's own domain level", qname: `w\ x.corp.example.`, action: Answer, rcode: dns.RcodeNameError},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := table.Lookup(dns.Question{Name: tc.qname, Qtype: dns.TypeA, Qclass: dns.ClassINET})
			if r.Action != tc.action || r.Rcode != tc.rcode {
				t.Errorf("Lookup(%s) = action %v rcode %d, want %v %d", tc.qname, r.Action, r.Rcode, tc.action, tc.rcode)
			}
		})
	}
}
