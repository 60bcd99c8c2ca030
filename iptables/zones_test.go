package iptables

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/testkit/netnstest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestConntrackZones reproduces the UDP conntrack race the raw-table
// zones exist for, with real packets. An app sends from pod:P to the
// nameserver (redirected to the agent's port); then the agent, as its own
// uid, happens to send its upstream query from the same pod:P. Without
// zones the agent's packet matches the app's NAT entry and is redirected
// to the agent itself; with zones it reaches the nameserver.
func TestConntrackZones(t *testing.T) {
	testenv.RequireTool(t, "setpriv")
	families := []zoneCase{
		{f: IPv4, ns: "198.18.0.1", pod: "198.18.0.2", agent: "127.0.0.1", nsCIDR: "198.18.0.1/24", podCIDR: "198.18.0.2/24"},
		{f: IPv6, ns: "fd00:198:18::1", pod: "fd00:198:18::2", agent: "::1", nsCIDR: "fd00:198:18::1/64", podCIDR: "fd00:198:18::2/64"},
	}
	self := netnstest.CopyTestBinary(t, "")
	for _, b := range []Backend{NFT, Legacy} {
		for _, fam := range families {
			t.Run(string(b)+" "+fam.f.String(), func(t *testing.T) { testZones(t, self, b, fam) })
		}
	}
}

// zoneCase is the addressing of one family in TestConntrackZones.
type zoneCase struct {
	f               Family
	ns, pod, agent  string // nameserver, pod and loopback addresses
	nsCIDR, podCIDR string
}

func testZones(t *testing.T, self string, b Backend, c zoneCase) {
	f, nsIP, podIP, agentIP := c.f, c.ns, c.pod, c.agent
	testenv.RequireTool(t, b.binary(f, "restore"))
	pod, r := newNetns(t)
	dnsNS, _ := newNetns(t)
	netnstest.Veth(t, pod, c.podCIDR, dnsNS, c.nsCIDR)
	netnstest.StartEcho(t, self, dnsNS, nil, net.JoinHostPort(nsIP, "53"), "upstream")
	netnstest.StartEcho(t, self, pod, nil, net.JoinHostPort(agentIP, "15053"), "agent")

	m, err := New(Config{ProxyUIDs: []uint32{1337}, Nameservers: addrs(nsIP), Backend: b, Runner: r})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	send := func(asAgent bool, port int) string {
		t.Helper()
		var as []string
		if asAgent {
			as = netnstest.As(1337)
		}
		// Unconnected: the test asks which listener a query reached; in
		// the control step the reply need not come from the nameserver's
		// address.
		return netnstest.Send(ctx, t, self, pod, as, "udp-any", net.JoinHostPort(podIP, fmt.Sprint(port)), net.JoinHostPort(nsIP, "53"))
	}

	// Control: the nat rules alone, without the raw-table zones.
	natOnly := ApplyInput(m.Ruleset(f), nil)
	natOnly = natOnly[strings.Index(natOnly, "*nat"):]
	mustRun(t, r, natOnly, b.binary(f, "restore"), "--noflush", "--wait=10")
	if got := send(false, 40001); got != "agent" {
		t.Fatalf("app query reached %q, want the agent", got)
	}
	if got := send(true, 40001); got != "agent" {
		t.Errorf("without zones the agent's query from the app's port reached %q; expected the race to loop it back to the agent", got)
	}
	if err := m.Clean(ctx); err != nil {
		t.Fatal(err)
	}

	// The real rules, and a fresh port: the control's conntrack
	// entries live on for the UDP timeout.
	if err := m.Apply(ctx); err != nil {
		t.Fatal(err)
	}
	if got := send(false, 40002); got != "agent" {
		t.Fatalf("app query reached %q, want the agent", got)
	}
	if got := send(true, 40002); got != "upstream" {
		t.Errorf("with zones the agent's query from the app's port reached %q, want the upstream", got)
	}
	if got := send(true, 40003); got != "upstream" {
		t.Errorf("the agent's query from a fresh port reached %q, want the upstream", got)
	}
}
