package nft

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/internal/testkit/netnstest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/meshdns/meshdns/iptables"
)

// newNetns creates an empty network namespace for one test, deleted when
// the test ends, and returns its name and an open descriptor of it.
func newNetns(t testing.TB) (string, int) {
	t.Helper()
	name := netnstest.New(t, "mdnft")
	return name, netnstest.Open(t, name)
}

// nftList returns `nft list ruleset` in the namespace, or "" without nft
// (the test then relies on Installed alone).
func nftList(t testing.TB, netns string) string {
	t.Helper()
	if _, err := exec.LookPath("nft"); err != nil {
		return ""
	}
	out, err := exec.Command("ip", "netns", "exec", netns, "nft", "list", "ruleset").CombinedOutput()
	if err != nil {
		t.Fatalf("nft list ruleset: %v: %s", err, out)
	}
	return string(out)
}

// wantCounts is the number of rules per chain Build makes for cfg.
func wantCounts(cfg Config) map[iptables.Family]map[string]int {
	out := map[iptables.Family]map[string]int{}
	for _, f := range cfg.families() {
		out[f] = map[string]int{}
		for _, c := range Build(cfg, f) {
			out[f][c.Name] = len(c.Rules)
		}
	}
	return out
}

// TestApplyCleanNetns applies twice, checks the live tables, and cleans,
// in a namespace that also holds another tool's nftables table and
// iptables-nft rules, which must come out untouched.
func TestApplyCleanNetns(t *testing.T) {
	name, fd := newNetns(t)
	foreign := exec.Command("ip", "netns", "exec", name, "nft", "-f", "-")
	foreign.Stdin = strings.NewReader("table inet other {\n chain out {\n  type nat hook output priority -100; policy accept;\n  tcp dport 8080 redirect to :9090\n }\n}\n")
	haveNft := false
	if _, err := exec.LookPath("nft"); err == nil {
		if out, err := foreign.CombinedOutput(); err != nil {
			t.Fatalf("nft -f: %v: %s", err, out)
		}
		haveNft = true
	} else if testenv.InCI() {
		t.Fatal("nft is needed in CI (hack/deps.sh installs nftables)")
	}
	before := nftList(t, name)

	cfg := Config{ProxyUIDs: []uint32{1337}, ProxyGIDs: []uint32{1337},
		Nameservers: []netip.Addr{netip.MustParseAddr("198.18.0.1"), netip.MustParseAddr("fd00:198:18::1")}, NetNS: fd}
	if err := Apply(cfg); err != nil {
		t.Fatalf("first apply: %v", err)
	}
	first := nftList(t, name)
	if err := Apply(cfg); err != nil {
		t.Fatalf("second apply: %v", err)
	}
	if diff := cmp.Diff(first, nftList(t, name)); diff != "" {
		t.Errorf("second apply changed the ruleset (-first +second):\n%s", diff)
	}
	got, err := Installed(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(wantCounts(cfg), got); diff != "" {
		t.Errorf("installed rules per chain (-want +got):\n%s", diff)
	}
	if haveNft {
		t.Logf("nft list ruleset after apply:\n%s", first)
		for _, want := range []string{
			"table inet other", "table ip meshdns", "table ip6 meshdns",
			"meta skuid 1337", "ct zone set 1", "redirect to :15053",
			`comment "meshdns DNS to 198.18.0.1 over udp to the agent"`,
			"ip6 daddr fd00:198:18::1",
		} {
			if !strings.Contains(first, want) {
				t.Errorf("ruleset lacks %q", want)
			}
		}
	}

	if err := Clean(cfg); err != nil {
		t.Fatalf("clean: %v", err)
	}
	if got, err := Installed(cfg); err != nil || len(got) != 0 {
		t.Errorf("Installed after clean = %v, %v; want no table", got, err)
	}
	if diff := cmp.Diff(before, nftList(t, name)); diff != "" {
		t.Errorf("clean did not restore the ruleset (-before +after):\n%s", diff)
	}
	if err := Clean(cfg); err != nil {
		t.Errorf("second clean: %v", err)
	}
}

// TestCaptureNetns sends real packets through the rules: an app's UDP and
// TCP port 53 to the nameserver reaches the agent's port; the agent's own
// query reaches the nameserver, also from the port an app just used (the
// conntrack zones); after Clean the app reaches the nameserver again.
func TestCaptureNetns(t *testing.T) {
	testenv.RequireTool(t, "setpriv")
	for _, c := range []struct {
		name                   string
		ns, pod, agent         string
		nsCIDR, podCIDR        string
		captureAll, disableIP6 bool
	}{
		{name: "ipv4", ns: "198.18.0.1", pod: "198.18.0.2", agent: "127.0.0.1", nsCIDR: "198.18.0.1/24", podCIDR: "198.18.0.2/24"},
		{name: "ipv6", ns: "fd00:198:18::1", pod: "fd00:198:18::2", agent: "::1", nsCIDR: "fd00:198:18::1/64", podCIDR: "fd00:198:18::2/64"},
		{name: "ipv4 capture all", ns: "198.18.0.1", pod: "198.18.0.2", agent: "127.0.0.1", nsCIDR: "198.18.0.1/24", podCIDR: "198.18.0.2/24", captureAll: true, disableIP6: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			self := netnstest.CopyTestBinary(t, "")
			pod, fd := newNetns(t)
			dnsNS, _ := newNetns(t)
			netnstest.Veth(t, pod, c.podCIDR, dnsNS, c.nsCIDR)
			netnstest.StartEcho(t, self, dnsNS, nil, net.JoinHostPort(c.ns, "53"), "upstream")
			// The agent runs as its uid: its replies to apps must be
			// put in the apps' zone, or conntrack would not translate
			// them back to the nameserver's address and the app's
			// connected socket would drop them.
			netnstest.StartEcho(t, self, pod, asAgent, net.JoinHostPort(c.agent, "15053"), "agent")

			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			sendFrom := func(network string, isAgent bool, port int) string {
				t.Helper()
				var as []string
				if isAgent {
					as = asAgent
				}
				return netnstest.Send(ctx, t, self, pod, as, network, net.JoinHostPort(c.pod, fmt.Sprint(port)), net.JoinHostPort(c.ns, "53"))
			}

			cfg := Config{ProxyUIDs: []uint32{1337}, Nameservers: []netip.Addr{netip.MustParseAddr(c.ns)},
				CaptureAllDNS: c.captureAll, DisableIPv6: c.disableIP6, NetNS: fd}
			if got := sendFrom("udp", false, 40001); got != "upstream" {
				t.Fatalf("before apply the app reached %q, want the nameserver", got)
			}
			if err := Apply(cfg); err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				what    string
				network string
				agent   bool
				port    int
				want    string
			}{
				{what: "app over udp", network: "udp", port: 40002, want: "agent"},
				{what: "app over tcp", network: "tcp", want: "agent"},
				{what: "agent from the app's port", network: "udp", agent: true, port: 40002, want: "upstream"},
				{what: "agent from a fresh port", network: "udp", agent: true, port: 40003, want: "upstream"},
				{what: "agent over tcp", network: "tcp", agent: true, want: "upstream"},
			} {
				if got := sendFrom(tc.network, tc.agent, tc.port); got != tc.want {
					t.Errorf("%s reached %q, want %q", tc.what, got, tc.want)
				}
			}
			if err := Clean(cfg); err != nil {
				t.Fatal(err)
			}
			if got := sendFrom("udp", false, 40004); got != "upstream" {
				t.Errorf("after clean the app reached %q, want the nameserver", got)
			}
		})
	}
}

// asAgent runs a command as the agent's uid and gid.
var asAgent = netnstest.As(1337)
