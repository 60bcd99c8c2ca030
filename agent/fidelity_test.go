package agent

import (
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// TestKubernetesFidelity asks a running agent, over its UDP and TCP
// sockets, the names where Kubernetes DNS has a rule CoreDNS users rely
// on: pod names, TTLs, SRV weights, negative answers, and a node search
// domain that must not be captured. The table is examples/nametable.json;
// the agent's --ttl is 45 so that every TTL shows where it comes from.
func TestKubernetesFidelity(t *testing.T) {
	up := startUpstream(t)
	path := writeFile(t, t.TempDir(), "nametable.json", readExample(t))
	// The node's own search domain, example.com, follows the cluster's,
	// as the kubelet writes it.
	resolv := writeFile(t, t.TempDir(), "resolv.conf",
		"nameserver 127.0.0.1\nsearch demo.svc.cluster.local svc.cluster.local cluster.local example.com\noptions ndots:5\n")
	base := Config{NameTableFile: path, Upstreams: []string{up.addr}, ResolvConf: resolv, TTL: 45}
	insecure := startAgent(t, base)
	forwarding := base
	forwarding.ForwardPods = true
	verified := startAgent(t, forwarding)
	eventually(t, "ready", func() bool { return insecure.Ready() && verified.Ready() })

	const soa = "cluster.local.\t45\tIN\tSOA\tns.dns.cluster.local. hostmaster.cluster.local. "
	tests := []struct {
		name     string
		agent    *testAgent
		qname    string
		qtype    uint16
		rcode    int
		answer   []string // full RRs, sorted
		nsPrefix string   // the authority's first RR starts with this
		upstream int64    // questions the upstream gets over UDP
		// uncached: the upstream's answer is not cached (an NXDOMAIN
		// without SOA, RFC 2308), so TCP asks it again.
		uncached bool
	}{
		{
			name: "pod A synthesized from the name, with --ttl", qname: "10-244-1-5.demo.pod.cluster.local.", qtype: dns.TypeA,
			answer: []string{"10-244-1-5.demo.pod.cluster.local.\t45\tIN\tA\t10.244.1.5"},
		},
		{
			name: "pod AAAA from the dashed IPv6 form", qname: "fd00--1-5.other.pod.cluster.local.", qtype: dns.TypeAAAA,
			answer: []string{"fd00--1-5.other.pod.cluster.local.\t45\tIN\tAAAA\tfd00::1:5"},
		},
		{
			name: "<ns>.pod.<domain> exists without data", qname: "demo.pod.cluster.local.", qtype: dns.TypeA,
			nsPrefix: soa,
		},
		{
			name: "a pod label that is no address is NXDOMAIN", qname: "web.demo.pod.cluster.local.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, nsPrefix: soa,
		},
		{
			name: "--pod-records forward asks the cluster DNS", agent: verified, qname: "10-244-1-5.demo.pod.cluster.local.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, upstream: 1, uncached: true, // the test upstream knows no pods
		},
		{
			name: "ExternalName CNAME carries --ttl, the target is chased", qname: "search.demo.svc.cluster.local.", qtype: dns.TypeA,
			answer:   []string{"search.demo.svc.cluster.local.\t45\tIN\tCNAME\twww.example.com.", "www.example.com.\t300\tIN\tA\t192.0.2.81"},
			upstream: 1,
		},
		{
			name: "dns-version has its own TTL", qname: "dns-version.cluster.local.", qtype: dns.TypeTXT,
			answer: []string{"dns-version.cluster.local.\t3600\tIN\tTXT\t\"1.1.0\""},
		},
		{
			name: "SRV of a headless service: priority 0, weight shared", qname: "_postgres._tcp.db.demo.svc.cluster.local.", qtype: dns.TypeSRV,
			answer: []string{
				"_postgres._tcp.db.demo.svc.cluster.local.\t45\tIN\tSRV\t0 50 5432 db-0.db.demo.svc.cluster.local.",
				"_postgres._tcp.db.demo.svc.cluster.local.\t45\tIN\tSRV\t0 50 5432 db-1.db.demo.svc.cluster.local.",
			},
		},
		{
			name: "a cluster search domain is expanded", qname: "web.demo.svc.cluster.local.svc.cluster.local.", qtype: dns.TypeA,
			answer: []string{
				"web.demo.svc.cluster.local.\t45\tIN\tA\t10.96.0.20",
				"web.demo.svc.cluster.local.svc.cluster.local.\t45\tIN\tCNAME\tweb.demo.svc.cluster.local.",
			},
		},
		{
			// web is a service of the pod's namespace, but web.example.com
			// may be a real host: it is never answered from the table.
			name: "the node's search domain is forwarded untouched", qname: "web.example.com.", qtype: dns.TypeA,
			rcode: dns.RcodeNameError, upstream: 1, uncached: true,
		},
	}
	for _, proto := range []string{"udp", "tcp"} {
		for _, tc := range tests {
			t.Run(proto+"/"+tc.name, func(t *testing.T) {
				a := insecure
				if tc.agent != nil {
					a = tc.agent
				}
				before := up.queries.Load()
				m := exchange(t, proto, a.dns, tc.qname, tc.qtype)
				if m.Rcode != tc.rcode {
					t.Errorf("rcode = %s, want %s", dns.RcodeToString[m.Rcode], dns.RcodeToString[tc.rcode])
				}
				var got []string
				for _, rr := range m.Answer {
					got = append(got, rr.String())
				}
				slices.Sort(got)
				if diff := cmp.Diff(tc.answer, got); diff != "" {
					t.Errorf("answer (-want +got):\n%s", diff)
				}
				if tc.nsPrefix != "" && (len(m.Ns) == 0 || !strings.HasPrefix(m.Ns[0].String(), tc.nsPrefix)) {
					t.Errorf("authority = %v, want an RR starting %q", m.Ns, tc.nsPrefix)
				}
				// Upstream answers are cached: TCP, asked second, finds
				// them there.
				want := tc.upstream
				if proto == "tcp" && !tc.uncached {
					want = 0
				}
				if n := up.queries.Load() - before; n != want {
					t.Errorf("upstream got %d questions, want %d", n, want)
				}
			})
		}
	}
}
