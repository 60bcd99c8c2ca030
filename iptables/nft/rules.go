package nft

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/meshdns/meshdns/iptables"
)

// Chains of the meshdns table. The two raw-priority chains set conntrack
// zones before conntrack looks the packet up (priority -200); the nat
// chain redirects at the priority of the iptables nat table.
const (
	chainRawPrerouting = "raw-prerouting"
	chainRawOutput     = "raw-output"
	chainNATOutput     = "nat-output"
)

// Conntrack zones, as in the iptables backend (see iptables/rules.go): the
// agent's upstream flows and the apps' redirected flows never share a
// conntrack entry, however the kernel picks source ports.
const (
	zoneUpstream uint16 = 1 // agent <-> upstream nameservers
	zoneApp      uint16 = 2 // apps <-> agent
)

// Chain is one base chain of the table.
type Chain struct {
	Name     string
	Type     string // "filter" or "nat"
	Hook     string // "prerouting" or "output"
	Priority int32  // -300 (raw) or -100 (dstnat)
	Rules    []Rule
}

// Owner is a socket owner match: meta skuid or meta skgid.
type Owner struct {
	GID bool // false: uid
	ID  uint32
}

func (o Owner) String() string {
	if o.GID {
		return "gid " + strconv.FormatUint(uint64(o.ID), 10)
	}
	return "uid " + strconv.FormatUint(uint64(o.ID), 10)
}

// Rule is one rule: its matches, then one action. Every match is optional.
type Rule struct {
	Owner *Owner
	// Saddr, Daddr match the network header's source or destination.
	Saddr, Daddr netip.Addr
	// Proto is "udp" or "tcp", with SPort or DPort; empty matches any.
	Proto        string
	SPort, DPort uint16
	// One action: Zone sets the conntrack zone and accepts (the first
	// zone that matches wins, as the CT target does in iptables);
	// Redirect sends to that local port; Accept ends the chain.
	Zone     uint16
	Redirect uint16
	Accept   bool
	Comment  string
}

// Build returns the meshdns table of family f: the same behaviour as the
// iptables backend's rules (iptables.Build), as nftables base chains.
func Build(cfg Config, f iptables.Family) []Chain {
	cfg = cfg.withDefaults()
	port := cfg.ProxyPort
	owners := owners(cfg)
	var nameservers []netip.Addr
	if !cfg.CaptureAllDNS {
		nameservers = addrsOf(cfg.Nameservers, f)
	}
	rawOut := Chain{Name: chainRawOutput, Type: "filter", Hook: "output", Priority: -300}
	rawPre := Chain{Name: chainRawPrerouting, Type: "filter", Hook: "prerouting", Priority: -300}
	natOut := Chain{Name: chainNATOutput, Type: "nat", Hook: "output", Priority: -100}
	// The agent's zone rules first: its query to a nameserver also matches
	// the apps' rule below.
	for _, o := range owners {
		rawOut.Rules = append(rawOut.Rules,
			Rule{Owner: &o, Proto: "udp", DPort: 53, Zone: zoneUpstream,
				Comment: fmt.Sprintf("agent %s queries upstream in zone %d", o, zoneUpstream)},
			Rule{Owner: &o, Proto: "udp", SPort: port, Zone: zoneApp,
				Comment: fmt.Sprintf("agent %s replies to apps in zone %d", o, zoneApp)})
		natOut.Rules = append(natOut.Rules, Rule{Owner: &o, Accept: true,
			Comment: "agent " + o.String() + " bypasses the capture"})
	}
	if cfg.CaptureAllDNS {
		rawOut.Rules = append(rawOut.Rules, Rule{Proto: "udp", DPort: 53, Zone: zoneApp,
			Comment: fmt.Sprintf("app queries in zone %d", zoneApp)})
		rawPre.Rules = append(rawPre.Rules, Rule{Proto: "udp", SPort: 53, Zone: zoneUpstream,
			Comment: fmt.Sprintf("upstream replies in zone %d", zoneUpstream)})
		for _, proto := range []string{"udp", "tcp"} {
			natOut.Rules = append(natOut.Rules, Rule{Proto: proto, DPort: 53, Redirect: port,
				Comment: "all DNS over " + proto + " to the agent"})
		}
	}
	for _, ns := range nameservers {
		rawOut.Rules = append(rawOut.Rules, Rule{Daddr: ns, Proto: "udp", DPort: 53, Zone: zoneApp,
			Comment: fmt.Sprintf("app queries to %s in zone %d", ns, zoneApp)})
		rawPre.Rules = append(rawPre.Rules, Rule{Saddr: ns, Proto: "udp", SPort: 53, Zone: zoneUpstream,
			Comment: fmt.Sprintf("replies from %s in zone %d", ns, zoneUpstream)})
		for _, proto := range []string{"udp", "tcp"} {
			natOut.Rules = append(natOut.Rules, Rule{Daddr: ns, Proto: proto, DPort: 53, Redirect: port,
				Comment: "DNS to " + ns.String() + " over " + proto + " to the agent"})
		}
	}
	return []Chain{rawPre, rawOut, natOut}
}

func owners(cfg Config) []Owner {
	var out []Owner
	seen := map[Owner]bool{}
	for _, u := range cfg.ProxyUIDs {
		if o := (Owner{ID: u}); !seen[o] {
			seen[o] = true
			out = append(out, o)
		}
	}
	for _, g := range cfg.ProxyGIDs {
		if o := (Owner{GID: true, ID: g}); !seen[o] {
			seen[o] = true
			out = append(out, o)
		}
	}
	return out
}

// addrsOf returns the addresses of family f without zone and duplicates,
// in input order. A zone cannot be matched in a rule; the address alone
// still matches.
func addrsOf(addrs []netip.Addr, f iptables.Family) []netip.Addr {
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	for _, a := range addrs {
		a = a.WithZone("").Unmap()
		if !a.IsValid() || a.Is4() != (f == iptables.IPv4) || seen[a] {
			continue
		}
		seen[a] = true
		out = append(out, a)
	}
	return out
}

// familyName is the nftables family of f: ip or ip6.
func familyName(f iptables.Family) string {
	if f == iptables.IPv6 {
		return "ip6"
	}
	return "ip"
}

// Render writes the table of family f in nft's syntax, for `meshdns
// iptables print` and for a person to compare with `nft list table`.
func Render(chains []Chain, f iptables.Family) string {
	var b strings.Builder
	fam := familyName(f)
	fmt.Fprintf(&b, "table %s %s {\n", fam, TableName)
	for i, c := range chains {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "\tchain %s {\n\t\ttype %s hook %s priority %d; policy accept;\n", c.Name, c.Type, c.Hook, c.Priority)
		for _, r := range c.Rules {
			fmt.Fprintf(&b, "\t\t%s\n", r.text(fam))
		}
		b.WriteString("\t}\n")
	}
	b.WriteString("}\n")
	return b.String()
}

func (r Rule) text(fam string) string {
	var parts []string
	if r.Owner != nil {
		key := "skuid"
		if r.Owner.GID {
			key = "skgid"
		}
		parts = append(parts, fmt.Sprintf("meta %s %d", key, r.Owner.ID))
	}
	if r.Saddr.IsValid() {
		parts = append(parts, fam+" saddr "+r.Saddr.String())
	}
	if r.Daddr.IsValid() {
		parts = append(parts, fam+" daddr "+r.Daddr.String())
	}
	if r.Proto != "" {
		parts = append(parts, "meta l4proto "+r.Proto)
		if r.SPort != 0 {
			parts = append(parts, fmt.Sprintf("%s sport %d", r.Proto, r.SPort))
		}
		if r.DPort != 0 {
			parts = append(parts, fmt.Sprintf("%s dport %d", r.Proto, r.DPort))
		}
	}
	switch {
	case r.Zone != 0:
		parts = append(parts, fmt.Sprintf("ct zone set %d accept", r.Zone))
	case r.Redirect != 0:
		parts = append(parts, fmt.Sprintf("redirect to :%d", r.Redirect))
	case r.Accept:
		parts = append(parts, "accept")
	}
	parts = append(parts, strconv.Quote("meshdns "+r.Comment))
	parts[len(parts)-1] = "comment " + parts[len(parts)-1]
	return strings.Join(parts, " ")
}
