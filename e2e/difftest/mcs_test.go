package difftest

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/meshdns/meshdns/controlplane/mcssource"
	"github.com/meshdns/meshdns/controlplane/registry"
	"github.com/meshdns/meshdns/e2e/internal/kubestack"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// The multi-cluster comparison: CoreDNS with `multicluster clusterset.local`
// (kubernetes plugin, CoreDNS 1.12.2+) and meshdns's multi-cluster source,
// on ServiceImports and their EndpointSlices written to the same API
// server, asked the same clusterset.local questions.

// Question forms of the clusterset.local corpus.
const (
	formMCSService  = "mcs-service"  // <svc>.<ns>.svc.clusterset.local
	formMCSSRV      = "mcs-srv"      // _<port>._<proto>.<svc>...
	formMCSEndpoint = "mcs-endpoint" // <hostname>.<clusterid>.<svc>... and dashed-IP names
	formMCSCluster  = "mcs-cluster"  // <clusterid>.<svc>...
	formMCSOther    = "mcs-other"    // unknown names, the zone's empty non-terminals
	formMCSPTR      = "mcs-ptr"      // PTR of an import's address
)

// mcsClasses are the differences docs/coredns-differences.md lists under
// "clusterset.local" (kept equal by TestMultiClusterClassesDocumented).
var mcsClasses = []class{
	{name: "mcs-srv-name-addresses", match: func(d difference) bool {
		return d.q.form == formMCSSRV && d.q.qtype != dns.TypeSRV && only(d.what, "answer") &&
			len(d.cd.answer) > 0 && len(d.md.answer) == 0
	}},
	{name: "mcs-headless-srv-targets", match: func(d difference) bool {
		if (d.q.form != formMCSService && d.q.form != formMCSSRV) || d.q.qtype != dns.TypeSRV || !only(d.what, "answer") ||
			len(d.cd.answer) == 0 || len(d.md.answer) == 0 {
			return false
		}
		// meshdns's targets are dashed-IP names right under the service.
		svc := strings.ToLower(d.q.name)
		if i := strings.Index(svc, "._tcp."); i >= 0 {
			svc = svc[i+len("._tcp."):]
		}
		for k := range d.md.answer {
			f := strings.Fields(k)
			if len(f) != 6 || !strings.HasSuffix(f[5], "."+svc) || strings.Count(strings.TrimSuffix(f[5], "."+svc), ".") != 0 {
				return false
			}
		}
		return true
	}},
	{name: "mcs-endpoint-srv", match: func(d difference) bool {
		return d.q.form == formMCSEndpoint && d.q.qtype == dns.TypeSRV && only(d.what, "answer") &&
			len(d.cd.answer) > 0 && len(d.md.answer) == 0
	}},
	{name: "mcs-service-dashed-names", match: func(d difference) bool {
		return d.q.form == formMCSEndpoint && d.cd.rcode == dns.RcodeNameError && d.md.rcode == dns.RcodeSuccess &&
			strings.Count(d.q.name, ".") == 6 // <dashed>.<svc>.<ns>.svc.clusterset.local.
	}},
	{name: "mcs-clustersetip-without-ip", match: func(d difference) bool {
		return (d.q.form == formMCSService || d.q.form == formMCSSRV) && strings.Contains(d.q.name, "noip.") &&
			d.cd.rcode == dns.RcodeSuccess && len(d.cd.answer) == 0 && d.md.rcode == dns.RcodeNameError
	}},
	{name: "mcs-empty-non-terminals", match: func(d difference) bool {
		// <ns>.svc.clusterset.local., svc.clusterset.local., clusterset.local.
		return d.q.form == formMCSOther && strings.Count(d.q.name, ".") <= 4 && !strings.HasPrefix(d.q.name, "nope.") &&
			d.cd.rcode == dns.RcodeNameError && d.md.rcode == dns.RcodeSuccess && len(d.md.answer) == 0
	}},
	{name: "mcs-clustersetip-ptr", match: func(d difference) bool {
		return d.q.form == formMCSPTR && d.cd.rcode == dns.RcodeNameError && !d.cd.aa &&
			d.md.rcode == dns.RcodeSuccess && len(d.md.answer) == 1
	}},
	{name: "mcs-cluster-names", match: func(d difference) bool {
		return d.q.form == formMCSCluster && d.cd.rcode == dns.RcodeNameError && d.md.rcode == dns.RcodeSuccess
	}},
}

// TestMultiClusterClassesDocumented keeps mcsClasses and the
// clusterset.local table of docs/coredns-differences.md the same list.
func TestMultiClusterClassesDocumented(t *testing.T) {
	doc, err := os.ReadFile("../../docs/coredns-differences.md")
	if err != nil {
		t.Fatal(err)
	}
	var documented, allowed []string
	for _, m := range regexp.MustCompile("(?m)^\\| clusterset\\.local \\| `([a-z0-9-]+)` \\|").FindAllStringSubmatch(string(doc), -1) {
		documented = append(documented, m[1])
	}
	for _, c := range mcsClasses {
		allowed = append(allowed, c.name)
	}
	slices.Sort(documented)
	if !slices.Equal(slices.Sorted(slices.Values(allowed)), documented) {
		t.Errorf("clusterset.local difference classes %q, documented %q", allowed, documented)
	}
}

// mcsImport is one ServiceImport of the generated set.
type mcsImport struct {
	name     string
	headless bool
	ips      []string
	ports    []any // spec.ports entries
	slices   []mcsSlice
}

type mcsSlice struct {
	cluster string
	family  discoveryv1.AddressType
	eps     []mcsEndpoint
}

type mcsEndpoint struct {
	hostname string // "" for none
	addr     string
	notReady bool
}

func port(name string, n int64, proto string) any {
	return map[string]any{"name": name, "port": n, "protocol": proto}
}

// mcsImports are the imports both servers see: ClusterSetIP v4 and v6 with
// named ports of both protocols, one without an IP yet, headless ones
// exported by two clusters (hostnames, dashed IPs, a not-ready endpoint,
// IPv6), one without endpoints, one exported by a cluster whose id is not
// a DNS label.
var mcsImports = []mcsImport{
	{name: "web", ips: []string{"10.210.0.1"}, ports: []any{port("http", 80, "TCP"), port("dns", 53, "UDP")}},
	{name: "six", ips: []string{"fd00:210::1"}, ports: []any{port("http", 80, "TCP")}},
	{name: "noip", ports: []any{port("http", 80, "TCP")}},
	{name: "db", headless: true, ports: []any{port("db", 5432, "TCP")}, slices: []mcsSlice{
		{cluster: "east", family: discoveryv1.AddressTypeIPv4, eps: []mcsEndpoint{
			{hostname: "db-0", addr: "10.211.0.1"}, {addr: "10.211.0.2"}, {hostname: "db-2", addr: "10.211.0.3", notReady: true}}},
		{cluster: "west", family: discoveryv1.AddressTypeIPv4, eps: []mcsEndpoint{{hostname: "db-0", addr: "10.212.0.1"}}},
		{cluster: "west", family: discoveryv1.AddressTypeIPv6, eps: []mcsEndpoint{{hostname: "db-0", addr: "fd00:212::1"}}},
	}},
	{name: "empty", headless: true, ports: []any{port("db", 5432, "TCP")}},
	// Written last: both servers have everything once they answer it.
	{name: "zz-ready", ips: []string{"10.210.0.99"}, ports: []any{port("http", 80, "TCP")}},
}

// createImports writes mcsImports into ns.
func createImports(ctx context.Context, t testing.TB, c *kubetest.Cluster, dyn dynamic.Interface, ns string) {
	t.Helper()
	for _, im := range mcsImports {
		typ := "ClusterSetIP"
		if im.headless {
			typ = "Headless"
		}
		kubestack.CreateServiceImport(ctx, t, dyn, kubestack.ServiceImport(ns, im.name, typ, im.ips, im.ports))
		for j, sl := range im.slices {
			portName, portNum, proto := "db", int32(5432), corev1.ProtocolTCP
			s := &discoveryv1.EndpointSlice{
				ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%s-%d", im.name, sl.cluster, j),
					Labels: map[string]string{mcssource.LabelServiceName: im.name, mcssource.LabelSourceCluster: sl.cluster}},
				AddressType: sl.family,
				Ports:       []discoveryv1.EndpointPort{{Name: &portName, Port: &portNum, Protocol: &proto}},
			}
			for _, ep := range sl.eps {
				e := discoveryv1.Endpoint{Addresses: []string{ep.addr}}
				if ep.hostname != "" {
					e.Hostname = &ep.hostname
				}
				if ep.notReady {
					f := false
					e.Conditions.Ready = &f
				}
				s.Endpoints = append(s.Endpoints, e)
			}
			if _, err := c.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// startCoreDNSMultiCluster runs CoreDNS as startCoreDNS does, with
// clusterset.local among the kubernetes plugin's zones and the
// multicluster option naming it.
func startCoreDNSMultiCluster(t testing.TB, c *kubetest.Cluster, upstream string) string {
	t.Helper()
	bin := coreDNSBinary(t)
	dir := t.TempDir()
	addr := testenv.FreeAddr(t)
	host, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	corefile := fmt.Sprintf(`.:%s {
    bind %s
    errors
    kubernetes cluster.local clusterset.local in-addr.arpa ip6.arpa {
        kubeconfig %s kubetest
        pods insecure
        ttl %d
        multicluster clusterset.local
        fallthrough in-addr.arpa ip6.arpa
    }
    forward . %s
}
`, p, host, c.Kubeconfig, tableTTL, upstream)
	conf := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(conf, []byte(corefile), 0o644); err != nil {
		t.Fatal(err)
	}
	proc, err := kubetest.StartProcess("coredns", bin, filepath.Join(dir, "coredns.log"), []string{"-conf", conf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("coredns log tail:\n%s", proc.Tail(30))
		}
		proc.Stop(5 * time.Second)
	})
	return addr
}

// mcsCorpus is every question of the comparison, in every transport.
func mcsCorpus(ns string) []question {
	base := func(svc string) string { return svc + "." + ns + ".svc.clusterset.local." }
	type q struct {
		name  string
		form  string
		types []uint16
	}
	addr := []uint16{dns.TypeA, dns.TypeAAAA, dns.TypeSRV, dns.TypeTXT}
	var qs []q
	for _, im := range mcsImports {
		qs = append(qs, q{base(im.name), formMCSService, addr})
		for _, srv := range []string{"_http._tcp.", "_dns._udp.", "_http._udp.", "_db._tcp."} {
			qs = append(qs, q{srv + base(im.name), formMCSSRV, []uint16{dns.TypeSRV, dns.TypeA}})
		}
	}
	for _, n := range []string{"db-0.east.", "db-0.west.", "db-2.east.", "db-0.", "10-211-0-2.", "10-211-0-2.east.", "10-211-0-3.", "fd00-212--1.", "db-9.east."} {
		qs = append(qs, q{n + base("db"), formMCSEndpoint, addr})
	}
	for _, n := range []string{"east.", "west.", "north."} {
		qs = append(qs, q{n + base("db"), formMCSCluster, addr})
	}
	for _, n := range []string{base("nope"), ns + ".svc.clusterset.local.", "svc.clusterset.local.", "clusterset.local.",
		"nope.svc.clusterset.local.", "x." + base("web")} {
		qs = append(qs, q{n, formMCSOther, addr})
	}
	// Only the ClusterSetIPs: CoreDNS 1.14.7 does not reply to the PTR of
	// a headless import's endpoint address (the question times out).
	for _, a := range []string{"10.210.0.1", "fd00:210::1"} {
		rev, _ := dns.ReverseAddr(a)
		qs = append(qs, q{rev, formMCSPTR, []uint16{dns.TypePTR}})
	}
	var out []question
	for _, x := range qs {
		for _, qt := range x.types {
			for tr := range numTransports {
				out = append(out, question{name: x.name, qtype: qt, tr: tr, form: x.form})
			}
		}
	}
	return out
}

// TestDifferentialMultiCluster compares the clusterset.local answers.
func TestDifferentialMultiCluster(t *testing.T) {
	coreDNSBinary(t)
	c := cluster.Get(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dyn, _ := kubestack.InstallServiceImportCRD(t, c)
	ns := c.Namespace(t, "mcs")
	createImports(ctx, t, c, dyn, ns)

	upstream := startUpstream(t)
	cd := startCoreDNSMultiCluster(t, c, upstream)
	client, err := mcssource.NewClientForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	src, err := mcssource.New(mcssource.Config{Client: client})
	if err != nil {
		t.Fatal(err)
	}
	md := kubestack.StartWith(t, c, ns, upstream, kubestack.Options{TTL: tableTTL, Sources: []registry.Source{src}}).DNS
	awaitAnswer(ctx, t, map[string]string{"coredns": cd, "meshdns": md}, "zz-ready."+ns+".svc.clusterset.local.")
	qs := mcsCorpus(ns)
	compareAll(t, cd, md, qs, ns, mcsClasses)
	t.Logf("%d ServiceImports, %d questions", len(mcsImports), len(qs))
}
