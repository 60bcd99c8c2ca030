package e2e

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	"github.com/meshdns/meshdns/internal/testkit/netnstest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/meshdns/meshdns/pkg/policy"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// muslResolve is a getaddrinfo client for musl's resolver: one line per
// name argument, "<name> <IPv4 addresses, comma-separated>" or "<name>
// error".
const muslResolve = `#include <stdio.h>
#include <string.h>
#include <netdb.h>
#include <arpa/inet.h>
int main(int argc, char **argv) {
	for (int i = 1; i < argc; i++) {
		struct addrinfo hints, *res, *p;
		memset(&hints, 0, sizeof hints);
		hints.ai_socktype = SOCK_STREAM;
		if (getaddrinfo(argv[i], NULL, &hints, &res) != 0) {
			printf("%s error\n", argv[i]);
			continue;
		}
		printf("%s ", argv[i]);
		const char *sep = "";
		for (p = res; p; p = p->ai_next) {
			if (p->ai_family != AF_INET) continue;
			char buf[INET_ADDRSTRLEN];
			inet_ntop(AF_INET, &((struct sockaddr_in *)p->ai_addr)->sin_addr, buf, sizeof buf);
			printf("%s%s", sep, buf);
			sep = ",";
		}
		printf("\n");
		freeaddrinfo(res);
	}
	return 0;
}
`

// policyRules is the worked example of docs/policy.md plus one corporate
// host: Stripe's API and S3 buckets, and nothing else outside the
// cluster.
var policyRules = []struct {
	pattern string
	action  meshdnsv1.PolicyAction
}{
	{"api.stripe.com", meshdnsv1.PolicyAction_POLICY_ACTION_ALLOW},
	{"*.s3.amazonaws.com", meshdnsv1.PolicyAction_POLICY_ACTION_ALLOW},
	{"wiki.corp.example.com", meshdnsv1.PolicyAction_POLICY_ACTION_ALLOW},
	{"*.wild.example", meshdnsv1.PolicyAction_POLICY_ACTION_ALLOW},
}

// tunnelResolvConf is podResolvConf with a search domain the pod chose
// itself (dnsConfig.searches) that no rule allows: the walk of every short
// name passes through it.
var tunnelResolvConf = strings.Replace(podResolvConf, " corp.example.com\n", " corp.example.com evil.test\n", 1)

// TestPolicyResolvers: unmodified resolvers (glibc, Go, musl) in a pod
// namespace whose DNS the capture sends to an agent enforcing a policy
// from a real control plane stream. Allowed names, short names through
// the search path and a CNAME chain within the allowed set resolve;
// denied names and a chain that leaves the set do not; and the upstream's
// log shows that no denied name left the pod, not even 1,000 random
// subdomains of a denied domain per resolver (DNS tunnelling), nor 1,000
// random labels under an allowed wildcard written under the pod's own
// search domain, which no rule allows (tunnelling through the search
// path): those resolve as written, every walk reaching the name.
func TestPolicyResolvers(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"ip", "getent", "setpriv", "musl-gcc"} {
		testenv.RequireTool(t, tool)
	}
	meshdns := buildMeshdns(t)
	tp := newTopology(t)
	// Before the agent starts: it reads the pod's search list once.
	if err := os.WriteFile(filepath.Join("/etc/netns", tp.pod, "resolv.conf"), []byte(tunnelResolvConf), 0o644); err != nil {
		t.Fatal(err)
	}
	musl := filepath.Join(tp.dir, "musl-resolve")
	src := filepath.Join(tp.dir, "musl-resolve.c")
	if err := os.WriteFile(src, []byte(muslResolve), 0o644); err != nil {
		t.Fatal(err)
	}
	run(t, "musl-gcc", "-static", "-O2", "-o", musl, src)

	// The control plane listens inside the pod's namespace, on loopback,
	// where the agent finds it.
	var cp *discoverytest.Server
	inNetns(t, tp.pod, func() { cp = discoverytest.Start(t, "127.0.0.1:0", nil) })
	tp.startInPod(t, agentID, "agent.log", nil, meshdns, "agent",
		"--dns-addr", "127.0.0.1:15053", "--control-plane", cp.Addr, "--resolv-conf", "/etc/resolv.conf",
		"--namespace", "demo", "--cluster-domain", "cluster.local", "--query-log", "denied", "--query-log-rate", "0")
	if id := cp.Recv(t).GetIdentity(); !slices.Contains(id.GetFeatures(), "policy") {
		t.Fatalf("agent features %q lack policy", id.GetFeatures())
	}
	table := &meshdnsv1.NameTable{
		Table: map[string]*meshdnsv1.NameInfo{
			"web.demo.svc.cluster.local": {Ips: []string{tableWebIP}, Registry: "Kubernetes", Shortname: "web", Namespace: "demo"},
		},
		AuthoritativeZones: []string{"cluster.local"},
		Settings: &meshdnsv1.AgentSettings{Requires: []string{"policy"}, Policy: &meshdnsv1.DNSPolicy{
			OutsideDefault: meshdnsv1.PolicyAction_POLICY_ACTION_DENY,
			Source:         "demo/egress",
		}},
	}
	for _, r := range policyRules {
		table.Settings.Policy.Rules = append(table.Settings.Policy.Rules, &meshdnsv1.PolicyRule{Pattern: r.pattern, Action: r.action})
	}
	cp.Send(discoverytest.Full("v1", "n1", table))
	if ack := cp.Recv(t); ack.GetVersionInfo() != "v1" || ack.GetErrorDetail() != nil {
		t.Fatalf("ack = %v", ack)
	}
	apply := []string{"iptables", "apply", "--proxy-uid", fmt.Sprint(agentID), "--proxy-gid", fmt.Sprint(agentID),
		"--resolv-conf", "/etc/resolv.conf"}
	if out, err := tp.inPod(nil, meshdns, apply...); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	t.Cleanup(func() { tp.inPod(nil, meshdns, "iptables", "clean") })

	resolvers := []struct {
		name    string
		resolve func(t *testing.T, names []string) map[string]string
	}{
		{"glibc", func(t *testing.T, names []string) map[string]string { return getentResolve(t, tp, names) }},
		{"go", func(t *testing.T, names []string) map[string]string {
			return lineResolve(t, tp, []string{roleEnv + "=resolve", "MESHDNS_E2E_NAMES=" + strings.Join(names, ",")}, tp.self)
		}},
		{"musl", func(t *testing.T, names []string) map[string]string { return lineResolve(t, tp, nil, musl, names...) }},
	}
	want := map[string]string{
		"web":                         tableWebIP, // a short name of the table
		"web.demo.svc.cluster.local":  tableWebIP,
		"api.stripe.com":              stripeIP,
		"stays.s3.amazonaws.com":      bucketIP, // its CNAME stays in the allowed set
		"wiki":                        wikiIP,   // a short name through the node's search domain
		"allowed.wild.example":        wildIP,   // as written, after its walk under evil.test
		"leaves.s3.amazonaws.com":     "error",  // its CNAME leaves the allowed set
		"external.example.org":        "error",
		"www.stripe.com":              "error",
		"x.tunnel.example":            "error",
		"web.corp.example.com":        "error",
		"nope.demo.svc.cluster.local": "error", // the table's NXDOMAIN
	}
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range want {
			if !yield(n) {
				return
			}
		}
	})
	mark := tp.queries.len()
	for _, r := range resolvers {
		t.Run(r.name, func(t *testing.T) {
			if diff := cmp.Diff(want, r.resolve(t, names)); diff != "" {
				t.Errorf("answers (-want +got)\n%s", diff)
			}
			var tunnel []string
			for range 1000 {
				tunnel = append(tunnel, fmt.Sprintf("%016x.%08x.tunnel.example", rand.Uint64(), rand.Uint32()))
			}
			before := tp.queries.len()
			for name, got := range r.resolve(t, tunnel) {
				if got != "error" {
					t.Errorf("%s resolved to %s", name, got)
				}
			}
			lines, _ := tp.queries.since(before)
			var out int
			for _, l := range lines {
				if strings.Contains(l, "tunnel.example") {
					out++
				}
			}
			t.Logf("%s: 1,000 random subdomains of a denied domain: %d queries reached the upstream", r.name, out)
			if out != 0 {
				t.Errorf("%d queries for the denied domain left the pod", out)
			}
			searchTunnel(t, tp, r.resolve)
		})
	}

	// Every name the upstream saw is one the policy allows: the query
	// names of allowed chains, and the expansions of allowed names under
	// the node's search domain.
	p, err := policy.New(policy.Config{OutsideDefault: policy.Deny, Rules: func() []policy.Rule {
		var rs []policy.Rule
		for _, r := range policyRules {
			rs = append(rs, policy.Rule{Pattern: r.pattern, Action: policy.Allow})
		}
		return rs
	}()})
	if err != nil {
		t.Fatal(err)
	}
	search := []string{"demo.svc.cluster.local", "svc.cluster.local", "cluster.local", "corp.example.com", "evil.test"}
	lines, _ := tp.queries.since(mark)
	var seen []string
	var random int
	for _, l := range lines {
		// "query <proto> <source ip> <name> <type>"
		f := strings.Fields(l)
		if len(f) != 5 {
			t.Fatalf("upstream log line %q", l)
		}
		if d := p.DecideSearch(f[3], false, search); d.Action != policy.Allow {
			t.Errorf("a denied name left the pod: %s", l)
		}
		switch {
		case strings.HasSuffix(f[3], wildDomain) && strings.Count(f[3], ".") == 4:
			random++ // searchTunnel's <hex>.<hex>.wild.example., as written
		case !slices.Contains(seen, f[3]):
			seen = append(seen, f[3])
		}
	}
	t.Logf("names the upstream saw: %v, and %d queries for random labels under *.wild.example", seen, random)

	// The control: the same policy in audit mode answers as if allowed,
	// and the tunnel's names do reach the upstream, so the count above
	// counts what would have left.
	table.Settings.Policy.Mode = meshdnsv1.PolicyMode_POLICY_MODE_AUDIT
	cp.Send(discoverytest.Full("v2", "n2", table))
	if ack := cp.Recv(t); ack.GetVersionInfo() != "v2" || ack.GetErrorDetail() != nil {
		t.Fatalf("ack = %v", ack)
	}
	before := tp.queries.len()
	got := lineResolve(t, tp, []string{roleEnv + "=resolve", "MESHDNS_E2E_NAMES=external.example.org,leaves.s3.amazonaws.com,y.tunnel.example"}, tp.self)
	if diff := cmp.Diff(map[string]string{"external.example.org": externalIP, "leaves.s3.amazonaws.com": s3WebIP, "y.tunnel.example": "error"}, got); diff != "" {
		t.Errorf("audit mode answers (-want +got)\n%s", diff)
	}
	if lines, _ := tp.queries.since(before); !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, " y.tunnel.example. ") }) {
		t.Errorf("audit mode: y.tunnel.example never reached the upstream: %q", lines)
	}

	// Denials answered REFUSED, and a rule denying the node's search
	// domain, so that api.stripe.com's walk meets a denied name
	// (api.stripe.com.corp.example.com) before the allowed one: under a
	// search domain the agent answers NXDOMAIN, and every resolver's walk,
	// musl's included (REFUSED would end it), goes on to the allowed name.
	table.Settings.Policy.Mode = meshdnsv1.PolicyMode_POLICY_MODE_ENFORCE
	table.Settings.Policy.DenyResponse = meshdnsv1.DenyResponse_DENY_RESPONSE_REFUSED
	table.Settings.Policy.Rules = append(table.Settings.Policy.Rules,
		&meshdnsv1.PolicyRule{Pattern: "*.corp.example.com", Action: meshdnsv1.PolicyAction_POLICY_ACTION_DENY})
	cp.Send(discoverytest.Full("v3", "n3", table))
	if ack := cp.Recv(t); ack.GetVersionInfo() != "v3" || ack.GetErrorDetail() != nil {
		t.Fatalf("ack = %v", ack)
	}
	refused := map[string]string{"web": tableWebIP, "wiki": wikiIP, "api.stripe.com": stripeIP, "www.stripe.com": "error"}
	for _, r := range resolvers {
		if diff := cmp.Diff(refused, r.resolve(t, []string{"web", "wiki", "api.stripe.com", "www.stripe.com"})); diff != "" {
			t.Errorf("%s, denials answered REFUSED (-want +got)\n%s", r.name, diff)
		}
	}
	log, err := os.ReadFile(filepath.Join(tp.dir, "agent.log"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(log), `"qname":"www.stripe.com.","qtype":"A","rcode":"NXDOMAIN","source":"local"`) ||
		!strings.Contains(string(log), `"rule":"outside_default"`) {
		t.Errorf("no denial line for www.stripe.com in the agent's log")
	}

	// v4: the same names and policy from a control plane without a
	// Kubernetes source, which sends no zone for the cluster domain.
	// Nobody the agent knows answers a name inside it, so the table
	// default (allow) forwards none: every walk's steps under the
	// cluster's search domains are answered in the pod, and only names
	// the policy allows as written reach the upstream.
	table.AuthoritativeZones = nil
	cp.Send(discoverytest.Full("v4", "n4", table))
	if ack := cp.Recv(t); ack.GetVersionInfo() != "v4" || ack.GetErrorDetail() != nil {
		t.Fatalf("ack = %v", ack)
	}
	unowned := map[string]string{"web": tableWebIP, "wiki": wikiIP, "api.stripe.com": stripeIP, "denied.example": "error",
		"nope.demo.svc.cluster.local": "error"}
	for _, r := range resolvers {
		before := tp.queries.len()
		if diff := cmp.Diff(unowned, r.resolve(t, slices.Sorted(maps.Keys(unowned)))); diff != "" {
			t.Errorf("%s, no zone for the cluster domain (-want +got)\n%s", r.name, diff)
		}
		lines, _ := tp.queries.since(before)
		for _, l := range lines {
			if strings.Contains(l, ".cluster.local. ") {
				t.Errorf("%s, no zone for the cluster domain: a name inside it reached the upstream: %s", r.name, l)
			}
		}
	}
}

// searchTunnel resolves 1,000 random labels under the allowed wildcard
// *.wild.example with resolve: each walk passes the pod's search domains
// corp.example.com (one name allowed) and evil.test (none), where the
// name meant is allowed but the name as written is not, then reaches the
// name as written. No query under either search domain may reach the
// upstream, and every name must resolve as written.
func searchTunnel(t *testing.T, tp *topology, resolve func(*testing.T, []string) map[string]string) {
	t.Helper()
	var names []string
	for range 1000 {
		names = append(names, fmt.Sprintf("%016x.%08x.wild.example", rand.Uint64(), rand.Uint32()))
	}
	before := tp.queries.len()
	var wrong []string
	for name, got := range resolve(t, names) {
		if got != wildIP {
			wrong = append(wrong, name+" "+got)
		}
	}
	if len(wrong) > 0 {
		t.Errorf("%d of 1,000 names under the allowed wildcard did not resolve as written (want %s), first %q", len(wrong), wildIP, wrong[0])
	}
	lines, _ := tp.queries.since(before)
	var tunnelled, written int
	for _, l := range lines {
		switch {
		case strings.Contains(l, ".wild.example.evil.test. "), strings.Contains(l, ".wild.example.corp.example.com. "):
			tunnelled++
		case strings.Contains(l, ".wild.example. "):
			written++
		}
	}
	t.Logf("1,000 random labels under *.wild.example written under the search domains evil.test and corp.example.com: %d queries reached the upstream (%d as written)", tunnelled, written)
	if tunnelled != 0 {
		t.Errorf("%d queries under a search domain no rule allows left the pod", tunnelled)
	}
	if written < len(names) {
		t.Errorf("%d queries as written reached the upstream, want at least %d: the walks stopped early", written, len(names))
	}
}

// getentResolve resolves names with glibc (getent ahostsv4, one process
// for each name: getent stops at the first key it cannot find).
func getentResolve(t *testing.T, tp *topology, names []string) map[string]string {
	t.Helper()
	got := map[string]string{}
	for _, n := range names {
		out, err := tp.inPod(nil, "getent", "ahostsv4", n)
		if err != nil {
			got[n] = "error"
			continue
		}
		var ips []string
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[1] == "STREAM" && !slices.Contains(ips, f[0]) {
				ips = append(ips, f[0])
			}
		}
		got[n] = strings.Join(ips, ",")
	}
	return got
}

// lineResolve runs a resolver client in the pod that prints "<name>
// <ips>" or "<name> error" per name, and returns its answers.
func lineResolve(t *testing.T, tp *topology, env []string, name string, args ...string) map[string]string {
	t.Helper()
	out, err := tp.inPod(env, name, args...)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		n, ips, _ := strings.Cut(line, " ")
		got[n] = ips
	}
	return got
}

// inNetns runs f on a thread inside the network namespace name: sockets f
// opens stay in it.
func inNetns(t *testing.T, name string, f func()) {
	t.Helper()
	target := netnstest.Open(t, name)
	runtime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer orig.Close()
	if err := unix.Setns(target, unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	f()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays in the namespace: keep it locked, so it ends
		// with this goroutine.
		t.Fatal(err)
	}
	runtime.UnlockOSThread()
}
