package nametable

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"
)

// publicFixture has Kubernetes services whose alternate forms are public
// names (google in namespace com, dev in the pod's namespace, api in
// namespace prod), beside an ordinary one (web in demo).
func publicFixture(tb testing.TB) *Table {
	tb.Helper()
	k8s := func(svc, ns, ip string) Entry {
		return Entry{
			Hostname: svc + "." + ns + ".svc.cluster.local", IPs: addrs(ip),
			Registry: "Kubernetes", ShortName: svc, Namespace: ns,
			Ports: []Port{{Name: "http", Port: 80, Protocol: "TCP"}},
		}
	}
	entries := []Entry{
		k8s("google", "com", "10.3.0.66"),
		k8s("dev", "demo", "10.3.0.67"),
		k8s("api", "prod", "10.3.0.68"),
		k8s("web", "demo", "10.3.0.10"),
		{
			Hostname: "db.com.svc.cluster.local", Registry: "Kubernetes", ShortName: "db", Namespace: "com",
			Endpoints: []Endpoint{{Hostname: "db-0", IPs: addrs("10.3.0.70")}},
		},
		{Hostname: "ext.demo.svc.cluster.local", Registry: "Kubernetes", ShortName: "ext", Namespace: "demo", CanonicalName: "google.com"},
	}
	t, err := New(entries, []string{"cluster.local"}, Context{
		Namespace: "demo",
		Search:    []string{"demo.svc.cluster.local", "svc.cluster.local", "cluster.local"},
	})
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	return t
}

// TestPublicNamesNotHijacked checks that an alternate form of a service
// that is a public name (its last label a top-level domain) is forwarded
// as asked, and answered under the pod's search domains, where the
// resolver's walk of a short name reaches it; ordinary forms answer both
// ways.
func TestPublicNamesNotHijacked(t *testing.T) {
	table := publicFixture(t)
	forward := view{Action: Forward}
	answer := func(line string) view { return view{Action: Answer, Answer: rrs(t, line)} }
	alias := func(to, line string) view { return view{Action: Answer, Alias: to, Answer: rrs(t, line)} }
	tests := []struct {
		name  string
		qname string
		qtype uint16
		want  view
	}{
		{name: "svc.ns of namespace com is the public name", qname: "google.com.", qtype: dns.TypeA, want: forward},
		{name: "in any case", qname: "Google.COM.", qtype: dns.TypeA, want: forward},
		{name: "nor its SRV names", qname: "_http._tcp.google.com.", qtype: dns.TypeSRV, want: forward},
		{name: "nor the endpoint names under it", qname: "db-0.db.com.", qtype: dns.TypeA, want: forward},
		{name: "a namespace that is a new gTLD", qname: "api.prod.", qtype: dns.TypeA, want: forward},
		{name: "bare svc named like a TLD", qname: "dev.", qtype: dns.TypeA, want: forward},
		{
			name: "an ExternalName to the public name is chased upstream", qname: "ext.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: view{Action: Answer, Answer: rrs(t, "ext.demo.svc.cluster.local. 30 IN CNAME google.com."), Chase: "google.com."},
		},
		{
			name: "the walk of the short name google.com reaches the service", qname: "google.com.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: alias("google.com.svc.cluster.local.", "google.com.svc.cluster.local. 30 IN A 10.3.0.66"),
		},
		{
			name: "its stored name answers", qname: "google.com.svc.cluster.local.", qtype: dns.TypeA,
			want: answer("google.com.svc.cluster.local. 30 IN A 10.3.0.66"),
		},
		{
			name: "svc.ns.svc is no public name", qname: "google.com.svc.", qtype: dns.TypeA,
			want: answer("google.com.svc. 30 IN A 10.3.0.66"),
		},
		{
			name: "the walk of api.prod", qname: "api.prod.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: alias("api.prod.svc.cluster.local.", "api.prod.svc.cluster.local. 30 IN A 10.3.0.68"),
		},
		{
			name: "the walk of the bare dev", qname: "dev.svc.cluster.local.", qtype: dns.TypeA,
			want: alias("dev.demo.svc.cluster.local.", "dev.demo.svc.cluster.local. 30 IN A 10.3.0.67"),
		},
		{name: "svc.ns of dev: demo is no TLD", qname: "dev.demo.", qtype: dns.TypeA, want: answer("dev.demo. 30 IN A 10.3.0.67")},
		{name: "ordinary svc.ns answers as asked", qname: "web.demo.", qtype: dns.TypeA, want: answer("web.demo. 30 IN A 10.3.0.10")},
		{name: "ordinary bare svc answers as asked", qname: "web.", qtype: dns.TypeA, want: answer("web. 30 IN A 10.3.0.10")},
		{
			name: "ordinary svc.ns under a search domain", qname: "web.demo.demo.svc.cluster.local.", qtype: dns.TypeA,
			want: alias("web.demo.svc.cluster.local.", "web.demo.svc.cluster.local. 30 IN A 10.3.0.10"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := table.Lookup(dns.Question{Name: tt.qname, Qtype: tt.qtype, Qclass: dns.ClassINET})
			if tt.qtype == dns.TypeSRV && got.Action == Answer {
				t.Fatalf("%s SRV answered from the table: %+v", tt.qname, got)
			}
			if diff := cmp.Diff(tt.want, viewOf(got, tt.qname)); diff != "" {
				t.Errorf("%s (-want +got):\n%s", tt.qname, diff)
			}
		})
	}
}

// TestPublicNamesPatched checks that a patch adding a service in a
// namespace that is a TLD keeps its svc.ns form off as asked, as New does.
func TestPublicNamesPatched(t *testing.T) {
	base := publicFixture(t)
	p, err := base.Patch(nil, []Entry{{
		Hostname: "mail.com.svc.cluster.local", IPs: addrs("10.3.0.80"),
		Registry: "Kubernetes", ShortName: "mail", Namespace: "com",
	}})
	if err != nil {
		t.Fatal(err)
	}
	for qname, want := range map[string]Action{"mail.com.": Forward, "mail.com.svc.": Answer, "mail.com.demo.svc.cluster.local.": Answer} {
		if got := p.Lookup(dns.Question{Name: qname, Qtype: dns.TypeA, Qclass: dns.ClassINET}); got.Action != want {
			t.Errorf("%s: action %v, want %v", qname, got.Action, want)
		}
	}
}
