package nametable

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// TestKubernetesFidelity covers what Kubernetes DNS (specification 1.1.0)
// and CoreDNS users rely on beyond the basic records: ExternalNames whose
// target the table knows, pod names, negative answers and TTLs.
func TestKubernetesFidelity(t *testing.T) {
	entries := []Entry{
		{Hostname: "web.demo.svc.cluster.local", IPs: addrs("10.3.0.10"), Registry: "Kubernetes", ShortName: "web", Namespace: "demo",
			Ports: []Port{{Name: "http", Port: 80, Protocol: "TCP"}}},
		{Hostname: "alias.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "alias", Namespace: "demo", CanonicalName: "web.demo.svc.cluster.local", TTL: 7},
		{Hostname: "hop.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "hop", Namespace: "demo", CanonicalName: "alias.demo.svc.cluster.local"},
		{Hostname: "tofile.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "tofile", Namespace: "demo", CanonicalName: "db.corp.internal"},
		{Hostname: "gone.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "gone", Namespace: "demo", CanonicalName: "missing.demo.svc.cluster.local"},
		{Hostname: "out.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "out", Namespace: "demo", CanonicalName: "hop2.demo.svc.cluster.local"},
		{Hostname: "hop2.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "hop2", Namespace: "demo", CanonicalName: "www.example.org"},
		{Hostname: "loop1.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "loop1", Namespace: "demo", CanonicalName: "loop2.demo.svc.cluster.local"},
		{Hostname: "loop2.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "loop2", Namespace: "demo", CanonicalName: "loop1.demo.svc.cluster.local"},
		{Hostname: "db.corp.internal", Registry: "File", IPs: addrs("192.168.1.5")},
		{Hostname: "empty.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "empty", Namespace: "demo", Ports: []Port{{Name: "http", Port: 80, Protocol: "TCP"}}},
		{Hostname: "pets.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "pets", Namespace: "demo",
			Endpoints: []Endpoint{{Hostname: "a", IPs: addrs("10.4.0.1")}, {Hostname: "b", IPs: addrs("10.4.0.2")}},
			Ports:     []Port{{Name: "http", Port: 80, Protocol: "TCP"}}},
	}
	pod := Context{Namespace: "demo", TTL: 12, Search: []string{"demo.svc.cluster.local", "svc.cluster.local", "cluster.local"}}
	table, err := New(entries, []string{"cluster.local"}, pod)
	if err != nil {
		t.Fatal(err)
	}
	forwarding := pod
	forwarding.ForwardPods = true
	verified, err := New(entries, []string{"cluster.local"}, forwarding)
	if err != nil {
		t.Fatal(err)
	}
	const soa = "cluster.local. 12 IN SOA ns.dns.cluster.local. hostmaster.cluster.local. 1 7200 1800 86400 12"

	tests := []struct {
		name  string
		table *Table
		qname string
		qtype uint16
		want  view
	}{
		// ExternalName targets the table knows are answered from it.
		{
			name: "ExternalName to a service: CNAME plus the service's records, no chase", qname: "alias.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Answer: rrs(t, "alias.demo.svc.cluster.local. 7 IN CNAME web.demo.svc.cluster.local."),
				Chain: rrs(t, "web.demo.svc.cluster.local. 12 IN A 10.3.0.10")},
		},
		{
			name: "ExternalName to an ExternalName: the chain, then the records", qname: "hop.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Answer: rrs(t, "hop.demo.svc.cluster.local. 12 IN CNAME alias.demo.svc.cluster.local."),
				Chain: rrs(t, "alias.demo.svc.cluster.local. 7 IN CNAME web.demo.svc.cluster.local.", "web.demo.svc.cluster.local. 12 IN A 10.3.0.10")},
		},
		{
			name: "ExternalName to a file entry", qname: "tofile.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Answer: rrs(t, "tofile.demo.svc.cluster.local. 12 IN CNAME db.corp.internal."),
				Chain: rrs(t, "db.corp.internal. 12 IN A 192.168.1.5")},
		},
		{
			name: "ExternalName to a known name without the type: NODATA after the CNAME", qname: "alias.demo.svc.cluster.local.", qtype: dns.TypeAAAA,
			want: view{Action: Answer, Answer: rrs(t, "alias.demo.svc.cluster.local. 7 IN CNAME web.demo.svc.cluster.local."), Ns: rrs(t, soa)},
		},
		{
			name: "ExternalName to an unknown name in the zone: CNAME and NXDOMAIN", qname: "gone.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Rcode: dns.RcodeNameError, Answer: rrs(t, "gone.demo.svc.cluster.local. 12 IN CNAME missing.demo.svc.cluster.local."), Ns: rrs(t, soa)},
		},
		{
			name: "a chain that leaves the table is chased from its last in-table target", qname: "out.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Answer: rrs(t, "out.demo.svc.cluster.local. 12 IN CNAME hop2.demo.svc.cluster.local."),
				Chain: rrs(t, "hop2.demo.svc.cluster.local. 12 IN CNAME www.example.org."), Chase: "www.example.org."},
		},
		{
			name: "CNAME question on an ExternalName chain: the one CNAME, nothing followed", qname: "hop.demo.svc.cluster.local.", qtype: dns.TypeCNAME,
			want: view{Action: Answer, Answer: rrs(t, "hop.demo.svc.cluster.local. 12 IN CNAME alias.demo.svc.cluster.local.")},
		},
		{
			name: "CNAME question on a chain that leaves the table: the one CNAME, no chase", qname: "out.demo.svc.cluster.local.", qtype: dns.TypeCNAME,
			want: view{Action: Answer, Answer: rrs(t, "out.demo.svc.cluster.local. 12 IN CNAME hop2.demo.svc.cluster.local.")},
		},
		{
			name: "CNAME question on an ExternalName loop: the one CNAME, no SERVFAIL", qname: "loop1.demo.svc.cluster.local.", qtype: dns.TypeCNAME,
			want: view{Action: Answer, Answer: rrs(t, "loop1.demo.svc.cluster.local. 12 IN CNAME loop2.demo.svc.cluster.local.")},
		},
		{
			name: "CNAME question through search expansion: the alias and the one CNAME", qname: "hop.demo.demo.svc.cluster.local.", qtype: dns.TypeCNAME,
			want: view{Action: Answer, Alias: "hop.demo.svc.cluster.local.", Answer: rrs(t, "hop.demo.svc.cluster.local. 12 IN CNAME alias.demo.svc.cluster.local.")},
		},
		{
			name: "an ExternalName loop is SERVFAIL", qname: "loop1.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Rcode: dns.RcodeServerFailure, Answer: rrs(t, "loop1.demo.svc.cluster.local. 12 IN CNAME loop2.demo.svc.cluster.local.")},
		},
		{
			name: "ExternalName in-table answers through search expansion too", qname: "alias.demo.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Alias: "alias.demo.svc.cluster.local.", Answer: rrs(t, "alias.demo.svc.cluster.local. 7 IN CNAME web.demo.svc.cluster.local."),
				Chain: rrs(t, "web.demo.svc.cluster.local. 12 IN A 10.3.0.10")},
		},

		// Pod names, "pods insecure".
		{
			name: "pod A from the dashed address", qname: "10-244-1-5.demo.pod.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Answer: rrs(t, "10-244-1-5.demo.pod.cluster.local. 12 IN A 10.244.1.5")},
		},
		{
			name: "pod AAAA from the dashed IPv6 address", qname: "FD00--1-5.other.pod.cluster.local.", qtype: dns.TypeAAAA,
			want: view{Action: Answer, Answer: rrs(t, "FD00--1-5.other.pod.cluster.local. 12 IN AAAA fd00::1:5")},
		},
		{
			name: "pod: NODATA for the other family", qname: "10-244-1-5.demo.pod.cluster.local.", qtype: dns.TypeAAAA,
			want: view{Action: Answer, Ns: rrs(t, soa)},
		},
		{
			name: "pod: <ns>.pod.<domain> exists, no data", qname: "demo.pod.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Ns: rrs(t, soa)},
		},
		{
			name: "pod: pod.<domain> exists, no data", qname: "pod.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Ns: rrs(t, soa)},
		},
		{
			name: "pod: a label that is no address is NXDOMAIN", qname: "web.demo.pod.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Rcode: dns.RcodeNameError, Ns: rrs(t, soa)},
		},
		{
			name: "pod: deeper names are NXDOMAIN", qname: "x.10-244-1-5.demo.pod.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Rcode: dns.RcodeNameError, Ns: rrs(t, soa)},
		},
		{
			name: "pod: with ForwardPods (pods verified) the cluster DNS answers", table: verified, qname: "10-244-1-5.demo.pod.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Forward},
		},
		{
			name: "pod: with ForwardPods the pod zone is forwarded too", table: verified, qname: "pod.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Forward},
		},

		// Negative answers.
		{
			name: "headless without ready endpoints is NXDOMAIN", qname: "empty.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Rcode: dns.RcodeNameError, Ns: rrs(t, soa)},
		},
		{
			name: "and so are its SRV names", qname: "_http._tcp.empty.demo.svc.cluster.local.", qtype: dns.TypeSRV,
			want: view{Action: Answer, Rcode: dns.RcodeNameError, Ns: rrs(t, soa)},
		},

		// TTLs and SRV weights.
		{
			name: "dns-version TXT has its own long TTL", qname: "dns-version.cluster.local.", qtype: dns.TypeTXT,
			want: view{Action: Answer, Answer: rrs(t, `dns-version.cluster.local. 3600 IN TXT "1.1.0"`)},
		},
		{
			name: "SRV: priority 0, the records share weight 100", qname: "_http._tcp.pets.demo.svc.cluster.local.", qtype: dns.TypeSRV,
			want: view{Action: Answer,
				Answer: rrs(t, "_http._tcp.pets.demo.svc.cluster.local. 12 IN SRV 0 50 80 a.pets.demo.svc.cluster.local.",
					"_http._tcp.pets.demo.svc.cluster.local. 12 IN SRV 0 50 80 b.pets.demo.svc.cluster.local."),
				Extra: rrs(t, "a.pets.demo.svc.cluster.local. 12 IN A 10.4.0.1", "b.pets.demo.svc.cluster.local. 12 IN A 10.4.0.2")},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tbl := table
			if tc.table != nil {
				tbl = tc.table
			}
			got := viewOf(tbl.Lookup(dns.Question{Name: tc.qname, Qtype: tc.qtype, Qclass: dns.ClassINET}), tc.qname)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Lookup(%s %s) (-want +got):\n%s", tc.qname, dns.TypeToString[tc.qtype], diff)
			}
		})
	}
}
