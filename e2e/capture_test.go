package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// The agent's table: a Kubernetes service and a wildcard file entry, with
// cluster.local complete (unknown names there are NXDOMAIN, locally).
const (
	tableWebIP  = "10.96.1.10"
	tableWildIP = "10.96.2.20"
	// The Service google in namespace com: its svc.ns form is the public
	// name google.com.
	tableGoogleIP = "10.96.1.66"
	externalIP    = "198.51.100.7" // upstreamRecords["external.example.org."]
	upstreamWeb   = "10.255.0.1"   // upstreamRecords["web.demo.svc.cluster.local."]
	agentID       = 1337
)

// foreignRules stand for another tool (a CNI plugin, kube-proxy) in the
// pod's tables: NTP untracked and a port 8080 redirect.
const foreignRules = `*raw
-A OUTPUT -p udp -m udp --dport 123 -j CT --notrack
COMMIT
*nat
-A OUTPUT -p tcp -m tcp --dport 8080 -j REDIRECT --to-ports 9090
COMMIT
`

func writeTable(t testing.TB, dir string) string {
	t.Helper()
	table := map[string]any{
		"table": map[string]any{
			"web.demo.svc.cluster.local": map[string]any{
				"ips": []string{tableWebIP}, "registry": "Kubernetes", "shortname": "web", "namespace": "demo",
			},
			"*.wild.example.com": map[string]any{"ips": []string{tableWildIP}, "registry": "File"},
			"google.com.svc.cluster.local": map[string]any{
				"ips": []string{tableGoogleIP}, "registry": "Kubernetes", "shortname": "google", "namespace": "com",
			},
		},
		"authoritativeZones": []string{"cluster.local"},
	}
	data, err := json.MarshalIndent(table, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "nametable.json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestCapture is the end-to-end test of traffic capture: unmodified resolvers in
// a pod namespace reach the agent through the iptables rules, for both
// iptables backends.
func TestCapture(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tool := range []string{"ip", "dig", "getent", "setpriv"} {
		testenv.RequireTool(t, tool)
	}
	meshdns := buildMeshdns(t)
	for _, backend := range []string{"nft", "legacy"} {
		t.Run(backend, func(t *testing.T) {
			testenv.RequireTool(t, "iptables-"+backend+"-restore")
			testCapture(t, meshdns, backend)
		})
	}
}

func testCapture(t *testing.T, meshdns, backend string) {
	tp := newTopology(t)
	table := writeTable(t, tp.dir)

	// Before anything is installed, the pod resolves directly through the
	// cluster DNS (whose answer for the service differs from the table's).
	expectGetent(t, tp, "hosts", "web", upstreamWeb)
	// Another tool's rules in the tables meshdns uses; clean must leave
	// them, and only them, behind.
	for _, tool := range []string{"iptables-" + backend + "-restore", "ip6tables-" + backend + "-restore"} {
		if _, err := tryRun(nil, "sh", "-c", "printf '%s' \"$0\" | ip netns exec \"$1\" \"$2\" --noflush --wait=10",
			foreignRules, tp.pod, tool); err != nil {
			t.Fatal(err)
		}
	}
	before := tp.save(t, backend)

	agent := startAgent(t, tp, meshdns, table)

	apply := []string{"iptables", "apply", "--proxy-uid", fmt.Sprint(agentID), "--proxy-gid", fmt.Sprint(agentID),
		"--resolv-conf", "/etc/resolv.conf"}
	if out, err := tp.inPod(nil, meshdns, apply...); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	// apply ran with --backend auto: it must have picked the backend that
	// holds the foreign rules.
	applied := tp.save(t, backend)
	if !strings.Contains(applied, "MESHDNS_REDIRECT") {
		t.Fatalf("apply (auto backend) installed no rules with %s:\n%s", backend, applied)
	}
	mark := tp.queries.len()

	t.Run("getent", func(t *testing.T) {
		for _, c := range []struct{ db, name, want string }{
			{db: "hosts", name: "web", want: tableWebIP},
			{db: "hosts", name: "web.demo", want: tableWebIP},
			{db: "hosts", name: "web.demo.svc.cluster.local", want: tableWebIP},
			{db: "hosts", name: "api.wild.example.com", want: tableWildIP},
			{db: "hosts", name: "external.example.org", want: externalIP},
			{db: "ahosts", name: "web", want: tableWebIP},
			{db: "ahosts", name: "web.demo", want: tableWebIP},
			{db: "ahosts", name: "external.example.org", want: externalIP},
			// Under the node's search domain: the corporate host, not the
			// pod's service of the same short name.
			{db: "hosts", name: "web.corp.example.com", want: corpWebIP},
			{db: "ahosts", name: "web.corp.example.com", want: corpWebIP},
			// The Service google of namespace com: fully qualified, the
			// public name; as a short name, the search walk reaches
			// google.com.svc.cluster.local first, as under kube-dns.
			{db: "hosts", name: "google.com.", want: publicGoogleIP},
			{db: "hosts", name: "google.com", want: tableGoogleIP},
		} {
			t.Run(c.db+" "+c.name, func(t *testing.T) { expectGetent(t, tp, c.db, c.name, c.want) })
		}
		// RES_OPTIONS=use-vc makes glibc ask over TCP.
		for _, c := range []struct{ name, want string }{
			{name: "web", want: tableWebIP},
			{name: "external.example.org", want: externalIP},
			{name: "web.corp.example.com", want: corpWebIP},
		} {
			t.Run("tcp hosts "+c.name, func(t *testing.T) {
				expectGetentEnv(t, tp, []string{"RES_OPTIONS=use-vc"}, "hosts", c.name, c.want)
			})
		}
	})

	t.Run("dig", func(t *testing.T) {
		for _, c := range []struct{ proto, name, want string }{
			{proto: "udp", name: "web", want: tableWebIP},
			{proto: "tcp", name: "web", want: tableWebIP},
			{proto: "udp", name: "web.demo", want: tableWebIP},
			{proto: "tcp", name: "web.demo", want: tableWebIP},
			{proto: "udp", name: "web.demo.svc.cluster.local.", want: tableWebIP},
			{proto: "tcp", name: "web.demo.svc.cluster.local.", want: tableWebIP},
			{proto: "udp", name: "x.wild.example.com", want: tableWildIP},
			{proto: "tcp", name: "x.wild.example.com", want: tableWildIP},
			{proto: "udp", name: "external.example.org", want: externalIP},
			{proto: "tcp", name: "external.example.org", want: externalIP},
			{proto: "udp", name: "web.corp.example.com", want: corpWebIP},
			{proto: "tcp", name: "web.corp.example.com", want: corpWebIP},
			{proto: "udp", name: "web.corp.example.com.", want: corpWebIP},
			{proto: "tcp", name: "web.corp.example.com.", want: corpWebIP},
			{proto: "udp", name: "web.demo.", want: tableWebIP},
			{proto: "udp", name: "google.com.", want: publicGoogleIP},
			{proto: "tcp", name: "google.com.", want: publicGoogleIP},
		} {
			t.Run(c.proto+" "+c.name, func(t *testing.T) {
				status, ips := dig(t, tp, c.proto, c.name)
				if status != "NOERROR" || !contains(ips, c.want) {
					t.Errorf("dig +search +%s %s = %s %q, want NOERROR with %s", c.proto, c.name, status, ips, c.want)
				}
			})
		}
	})

	t.Run("go resolver", func(t *testing.T) {
		names := []string{"web", "web.demo", "web.demo.svc.cluster.local", "y.wild.example.com", "external.example.org", "nosuch", "web.corp.example.com", "google.com."}
		want := map[string]string{
			"web": tableWebIP, "web.demo": tableWebIP, "web.demo.svc.cluster.local": tableWebIP,
			"y.wild.example.com": tableWildIP, "external.example.org": externalIP, "nosuch": "error",
			"web.corp.example.com": corpWebIP, "google.com.": publicGoogleIP,
		}
		for _, proto := range []string{"udp", "tcp"} {
			t.Run(proto, func(t *testing.T) {
				out, err := tp.inPod([]string{roleEnv + "=resolve", "GODEBUG=netdns=go",
					"MESHDNS_E2E_NAMES=" + strings.Join(names, ","), "MESHDNS_E2E_NET=" + proto}, tp.self)
				if err != nil {
					t.Fatal(err)
				}
				got := map[string]string{}
				for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
					name, ips, _ := strings.Cut(line, " ")
					got[name] = ips
				}
				if diff := cmp.Diff(want, got); diff != "" {
					t.Errorf("Go resolver over %s (-want +got):\n%s", proto, diff)
				}
			})
		}
	})

	t.Run("unknown cluster name is NXDOMAIN locally", func(t *testing.T) {
		n := tp.queries.len()
		for _, proto := range []string{"udp", "tcp"} {
			if status, _ := dig(t, tp, proto, "nosuch.demo.svc.cluster.local."); status != "NXDOMAIN" {
				t.Errorf("dig +%s nosuch.demo.svc.cluster.local. status %s, want NXDOMAIN", proto, status)
			}
		}
		if lines, _ := tp.queries.since(n); len(lines) != 0 {
			t.Errorf("the unknown cluster name reached the upstream %d times: %q", len(lines), lines)
		}
		// getent walks the search list (all NXDOMAIN in the pod), then asks
		// for the bare name, which is outside the cluster zone and goes
		// upstream.
		if out, err := tp.inPod(nil, "getent", "hosts", "nosuch"); err == nil {
			t.Errorf("getent hosts nosuch resolved: %s", out)
		}
	})

	// Everything above went through the agent: the cluster DNS saw no
	// question in the cluster zone (the ndots:5 walk of external names and
	// every unknown name were answered in the pod), and it did see the
	// agent's own queries for the external name, so they were not
	// redirected back to the agent.
	t.Run("upstream saw only forwarded external names", func(t *testing.T) {
		lines, _ := tp.queries.since(mark)
		external := 0
		for _, l := range lines {
			f := strings.Fields(l) // query <proto> <src> <name> <type>
			if len(f) != 5 {
				t.Fatalf("bad upstream log line %q", l)
			}
			if strings.HasSuffix(f[3], "cluster.local.") {
				t.Errorf("a cluster name reached the upstream: %s", l)
			}
			if f[3] == "external.example.org." {
				external++
			}
			if f[2] != podIP {
				t.Errorf("query from unexpected source: %s", l)
			}
		}
		if external == 0 {
			t.Errorf("the agent never forwarded external.example.org; upstream saw %q", lines)
		}
		t.Logf("upstream received %d queries during the captured phase, %d for external.example.org: %q", len(lines), external, lines)
	})

	t.Run("only the listed nameservers are captured, unless capture-all-dns", func(t *testing.T) {
		// 198.18.0.99 is on the pod's link but nobody has it: a query that
		// is not captured times out.
		const other = "198.18.0.99"
		direct := func() (string, error) {
			return tp.inPod(nil, "dig", "@"+other, "+time=1", "+tries=1", "+short", "web.demo.svc.cluster.local.")
		}
		if out, err := direct(); err == nil && strings.TrimSpace(out) != "" {
			t.Errorf("dig @%s was answered (%q) although it is not a nameserver of the pod", other, out)
		}
		if out, err := tp.inPod(nil, meshdns, append(append([]string{}, apply...), "--capture-all-dns")...); err != nil {
			t.Fatalf("apply --capture-all-dns: %v\n%s", err, out)
		}
		if out, err := direct(); err != nil || strings.TrimSpace(out) != tableWebIP {
			t.Errorf("with --capture-all-dns, dig @%s = %q, %v; want the agent's %s", other, out, err, tableWebIP)
		}
		// Back to the pod's nameservers: the rules are exactly the first
		// apply's again.
		if out, err := tp.inPod(nil, meshdns, apply...); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
		if diff := cmp.Diff(applied, tp.save(t, backend)); diff != "" {
			t.Errorf("switching back from --capture-all-dns left other rules (-want +got):\n%s", diff)
		}
	})

	t.Run("apply is idempotent", func(t *testing.T) {
		// print and --dry-run show the transaction and change nothing.
		for _, args := range [][]string{
			{"iptables", "print", "--proxy-uid", fmt.Sprint(agentID), "--resolv-conf", "/etc/resolv.conf"},
			append(append([]string{}, apply...), "--dry-run"),
			{"iptables", "clean", "--dry-run"},
		} {
			out, err := tp.inPod(nil, meshdns, args...)
			if err != nil {
				t.Fatalf("%q: %v", args, err)
			}
			if !strings.Contains(out, "-D OUTPUT -m comment --comment \"meshdns capture DNS\" -j MESHDNS_OUTPUT") {
				t.Errorf("%q does not show the jump being replaced:\n%s", args, out)
			}
		}
		if diff := cmp.Diff(applied, tp.save(t, backend)); diff != "" {
			t.Errorf("print or --dry-run changed the rules (-before +after):\n%s", diff)
		}
		if out, err := tp.inPod(nil, meshdns, apply...); err != nil {
			t.Fatalf("second apply: %v\n%s", err, out)
		}
		if diff := cmp.Diff(applied, tp.save(t, backend)); diff != "" {
			t.Errorf("second apply changed the rules (-first +second):\n%s", diff)
		}
		// The rules still work after the re-apply.
		expectGetent(t, tp, "hosts", "web", tableWebIP)
	})

	t.Run("stopped agent means failure, not bypass", func(t *testing.T) {
		stop(agent)
		n := tp.queries.len()
		if status, ips := dig(t, tp, "udp", "web.demo.svc.cluster.local."); status == "NOERROR" || len(ips) > 0 {
			t.Errorf("dig web.demo.svc.cluster.local. with the agent stopped = %s %q, want a failure", status, ips)
		}
		if status, ips := dig(t, tp, "tcp", "external.example.org"); status == "NOERROR" || len(ips) > 0 {
			t.Errorf("dig +tcp external.example.org with the agent stopped = %s %q, want a failure", status, ips)
		}
		// RES_OPTIONS shortens glibc's wait for the missing reply: the
		// kernel's port-unreachable error for the redirected packet stays in
		// the default conntrack zone and never reaches the client, so it
		// times out instead of failing at once.
		if out, err := tp.inPod([]string{"RES_OPTIONS=timeout:1 attempts:1"}, "getent", "hosts", "external.example.org"); err == nil {
			t.Errorf("getent resolved with the agent stopped: %s", out)
		}
		if lines, _ := tp.queries.since(n); len(lines) != 0 {
			t.Errorf("queries bypassed the stopped agent: %q", lines)
		}
	})

	t.Run("clean restores direct resolution", func(t *testing.T) {
		if out, err := tp.inPod(nil, meshdns, "iptables", "clean"); err != nil {
			t.Fatalf("clean: %v\n%s", err, out)
		}
		if diff := cmp.Diff(before, tp.save(t, backend)); diff != "" {
			t.Errorf("clean left rules behind (-before +after):\n%s", diff)
		}
		n := tp.queries.len()
		expectGetent(t, tp, "hosts", "web", upstreamWeb)
		if lines, _ := tp.queries.since(n); len(lines) == 0 {
			t.Errorf("the cluster DNS saw no query after clean")
		}
	})
}

// startAgent runs the agent in the pod namespace as agentID and waits until
// it answers from its table on its own port.
func startAgent(t *testing.T, tp *topology, meshdns, table string) *exec.Cmd {
	t.Helper()
	cmd := tp.startInPod(t, agentID, "agent.log", nil, meshdns, "agent",
		"--dns-addr", "127.0.0.1:15053", "--nametable-file", table, "--resolv-conf", "/etc/resolv.conf",
		"--namespace", "demo", "--cluster-domain", "cluster.local")
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ := tp.inPod(nil, "dig", "@127.0.0.1", "-p", "15053", "+time=1", "+tries=1", "+short", "web.demo.svc.cluster.local.")
		if strings.TrimSpace(out) == tableWebIP {
			return cmd
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent not answering from its table after 20s (last answer %q)", out)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// expectGetent checks that getent DB NAME in the pod lists want.
func expectGetent(t *testing.T, tp *topology, db, name, want string) {
	t.Helper()
	expectGetentEnv(t, tp, nil, db, name, want)
}

// expectGetentEnv is expectGetent with extra environment variables, such
// as RES_OPTIONS for glibc.
func expectGetentEnv(t *testing.T, tp *topology, env []string, db, name, want string) {
	t.Helper()
	out, err := tp.inPod(env, "getent", db, name)
	if err != nil {
		t.Errorf("getent %s %s: %v", db, name, err)
		return
	}
	var ips []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			ips = append(ips, f[0])
		}
	}
	if !contains(ips, want) {
		t.Errorf("getent %s %s = %q, want %s", db, name, ips, want)
	}
}

// dig resolves name in the pod the way a user would (the pod's resolv.conf
// and, with +search, its search list) over proto, and returns the status
// of the reply ("FAIL" when there is none) and the A records of its answer.
func dig(t *testing.T, tp *topology, proto, name string) (status string, ips []string) {
	t.Helper()
	args := append([]string{"+search", "+time=2", "+tries=1"}, tcpFlag(proto)...)
	out, err := tp.inPod(nil, "dig", append(args, name, "A")...)
	if err != nil {
		return "FAIL", nil
	}
	for _, line := range strings.Split(out, "\n") {
		// ";; ->>HEADER<<- opcode: QUERY, status: NXDOMAIN, id: 4711"
		if _, rest, ok := strings.Cut(line, "status: "); ok && status == "" {
			status, _, _ = strings.Cut(rest, ",")
		}
		if f := strings.Fields(line); len(f) == 5 && f[3] == "A" && !strings.HasPrefix(line, ";") {
			ips = append(ips, f[4])
		}
	}
	if status == "" {
		status = "FAIL"
	}
	sort.Strings(ips)
	return status, ips
}

func tcpFlag(proto string) []string {
	if proto == "tcp" {
		return []string{"+tcp"}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
