package nft

import (
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/internal/testkit/testenv"
	"github.com/meshdns/meshdns/iptables"
)

// TestBuild pins the rules of one configuration: the order (the agent's
// zone rules first, the bypass before the redirects), the zones and the
// matches, per family.
func TestBuild(t *testing.T) {
	cfg := Config{ProxyUIDs: []uint32{1337, 1337}, ProxyGIDs: []uint32{1338}, ProxyPort: 15153,
		Nameservers: []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00::a"), netip.MustParseAddr("10.96.0.10")}}
	got := Render(Build(cfg, iptables.IPv4), iptables.IPv4)
	want := `table ip meshdns {
	chain raw-prerouting {
		type filter hook prerouting priority -300; policy accept;
		ip saddr 10.96.0.10 meta l4proto udp udp sport 53 ct zone set 1 accept comment "meshdns replies from 10.96.0.10 in zone 1"
	}

	chain raw-output {
		type filter hook output priority -300; policy accept;
		meta skuid 1337 meta l4proto udp udp dport 53 ct zone set 1 accept comment "meshdns agent uid 1337 queries upstream in zone 1"
		meta skuid 1337 meta l4proto udp udp sport 15153 ct zone set 2 accept comment "meshdns agent uid 1337 replies to apps in zone 2"
		meta skgid 1338 meta l4proto udp udp dport 53 ct zone set 1 accept comment "meshdns agent gid 1338 queries upstream in zone 1"
		meta skgid 1338 meta l4proto udp udp sport 15153 ct zone set 2 accept comment "meshdns agent gid 1338 replies to apps in zone 2"
		ip daddr 10.96.0.10 meta l4proto udp udp dport 53 ct zone set 2 accept comment "meshdns app queries to 10.96.0.10 in zone 2"
	}

	chain nat-output {
		type nat hook output priority -100; policy accept;
		meta skuid 1337 accept comment "meshdns agent uid 1337 bypasses the capture"
		meta skgid 1338 accept comment "meshdns agent gid 1338 bypasses the capture"
		ip daddr 10.96.0.10 meta l4proto udp udp dport 53 redirect to :15153 comment "meshdns DNS to 10.96.0.10 over udp to the agent"
		ip daddr 10.96.0.10 meta l4proto tcp tcp dport 53 redirect to :15153 comment "meshdns DNS to 10.96.0.10 over tcp to the agent"
	}
}
`
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("ipv4 (-want +got):\n%s", diff)
	}
	v6 := Render(Build(cfg, iptables.IPv6), iptables.IPv6)
	for _, w := range []string{"table ip6 meshdns {", "ip6 daddr fd00::a meta l4proto tcp tcp dport 53 redirect to :15153"} {
		if !strings.Contains(v6, w) {
			t.Errorf("ipv6 lacks %q:\n%s", w, v6)
		}
	}
	if strings.Contains(v6, "10.96.0.10") {
		t.Errorf("ipv6 table names an IPv4 nameserver:\n%s", v6)
	}
}

// TestApplyErrors: Apply refuses what would capture nothing or the agent
// itself, before touching the kernel.
func TestApplyErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
	}{
		{name: "no owner", cfg: Config{Nameservers: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}},
		{name: "no nameserver", cfg: Config{ProxyUIDs: []uint32{1337}}},
		{name: "invalid nameserver", cfg: Config{ProxyUIDs: []uint32{1337}, Nameservers: []netip.Addr{{}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := Apply(tc.cfg); err == nil {
				t.Error("Apply succeeded")
			}
		})
	}
}

// TestRenderIsNftSyntax: what `meshdns iptables print --backend native`
// shows is a ruleset nft itself accepts (checked, not applied, in a
// namespace of the test's own).
func TestRenderIsNftSyntax(t *testing.T) {
	nft := testenv.RequireTool(t, "nft")
	name, _ := newNetns(t)
	cfg := Config{ProxyUIDs: []uint32{1337}, ProxyGIDs: []uint32{1337},
		Nameservers: []netip.Addr{netip.MustParseAddr("10.96.0.10"), netip.MustParseAddr("fd00::a")}}
	for _, f := range []iptables.Family{iptables.IPv4, iptables.IPv6} {
		cmd := exec.Command("ip", "netns", "exec", name, nft, "-c", "-f", "-")
		cmd.Stdin = strings.NewReader(Render(Build(cfg, f), f))
		cmd.Stderr = os.Stderr
		if out, err := cmd.Output(); err != nil {
			t.Errorf("nft -c rejects the %s rendering: %v %s", f, err, out)
		}
	}
}
