package iptables

import (
	"net/netip"
	"strconv"
)

// Chain names. The nat and raw tables each have a MESHDNS_OUTPUT; chains
// are per table, and naming ours after the built-in chain that jumps to it
// keeps iptables-save output readable.
const (
	chainOutput     = ChainPrefix + "OUTPUT"
	chainRedirect   = ChainPrefix + "REDIRECT"
	chainPrerouting = ChainPrefix + "PREROUTING"
)

// Conntrack zones for UDP DNS. Without them a known race sends queries past
// the agent: the app's flow (pod:P -> ns:53, rewritten to 127.0.0.1:15053)
// and the agent's own upstream flow (pod:Q -> ns:53) share a conntrack
// tuple whenever the kernel picks Q == P, so the agent's packet matches the
// app's NAT entry and is redirected to the agent itself, or the upstream's
// reply is translated for the wrong socket. Keeping app<->agent flows in one
// zone and agent<->upstream flows in another makes the tuples distinct.
// Istio's sidecar DNS capture uses the same split.
const (
	zoneUpstream = "1" // agent <-> upstream nameservers
	zoneApp      = "2" // apps <-> agent (the redirected flow)
)

// Build returns the rules for one family. It is a pure function of the
// configuration: the same input renders byte-identical rules, which makes
// golden files and drift checks possible.
func Build(cfg Config, f Family) Ruleset {
	if cfg.ProxyPort == 0 {
		cfg.ProxyPort = DefaultProxyPort
	}
	port := strconv.Itoa(int(cfg.ProxyPort))
	owners := ownerMatches(cfg)
	var nameservers []string
	if !cfg.CaptureAllDNS {
		nameservers = hostPrefixes(cfg.Nameservers, f)
	}

	rs := Ruleset{Family: f}
	rs.Jumps = []Rule{
		{Table: "raw", Chain: "PREROUTING", Comment: "conntrack zones for DNS replies", Target: []string{chainPrerouting}},
		{Table: "raw", Chain: "OUTPUT", Comment: "conntrack zones for DNS queries", Target: []string{chainOutput}},
		{Table: "nat", Chain: "OUTPUT", Comment: "capture DNS", Target: []string{chainOutput}},
	}

	// raw OUTPUT: the agent's rules come first because the first CT target
	// that matches a packet wins; the agent's query to a nameserver also
	// matches the apps' rule below.
	rawOut := Chain{Table: "raw", Name: chainOutput}
	for _, o := range owners {
		rawOut.Rules = append(rawOut.Rules,
			Rule{Match: concat([]string{"-p", "udp"}, o.match, []string{"-m", "udp", "--dport", "53"}),
				Comment: "agent " + o.name + " queries upstream in zone " + zoneUpstream,
				Target:  []string{"CT", "--zone", zoneUpstream}},
			Rule{Match: concat([]string{"-p", "udp"}, o.match, []string{"-m", "udp", "--sport", port}),
				Comment: "agent " + o.name + " replies to apps in zone " + zoneApp,
				Target:  []string{"CT", "--zone", zoneApp}},
		)
	}
	rawPre := Chain{Table: "raw", Name: chainPrerouting}
	natOut := Chain{Table: "nat", Name: chainOutput}
	for _, o := range owners {
		natOut.Rules = append(natOut.Rules, Rule{Match: o.match,
			Comment: "agent " + o.name + " bypasses the capture", Target: []string{"RETURN"}})
	}
	if cfg.CaptureAllDNS {
		rawOut.Rules = append(rawOut.Rules, Rule{Match: []string{"-p", "udp", "-m", "udp", "--dport", "53"},
			Comment: "app queries in zone " + zoneApp, Target: []string{"CT", "--zone", zoneApp}})
		rawPre.Rules = append(rawPre.Rules, Rule{Match: []string{"-p", "udp", "-m", "udp", "--sport", "53"},
			Comment: "upstream replies in zone " + zoneUpstream, Target: []string{"CT", "--zone", zoneUpstream}})
		for _, proto := range []string{"udp", "tcp"} {
			natOut.Rules = append(natOut.Rules, Rule{Match: []string{"-p", proto, "-m", proto, "--dport", "53"},
				Comment: "all DNS over " + proto, Target: []string{chainRedirect}})
		}
	}
	for _, ns := range nameservers {
		rawOut.Rules = append(rawOut.Rules, Rule{Match: []string{"-d", ns, "-p", "udp", "-m", "udp", "--dport", "53"},
			Comment: "app queries to " + ns + " in zone " + zoneApp, Target: []string{"CT", "--zone", zoneApp}})
		rawPre.Rules = append(rawPre.Rules, Rule{Match: []string{"-s", ns, "-p", "udp", "-m", "udp", "--sport", "53"},
			Comment: "replies from " + ns + " in zone " + zoneUpstream, Target: []string{"CT", "--zone", zoneUpstream}})
		for _, proto := range []string{"udp", "tcp"} {
			natOut.Rules = append(natOut.Rules, Rule{Match: []string{"-d", ns, "-p", proto, "-m", proto, "--dport", "53"},
				Comment: "DNS to " + ns + " over " + proto, Target: []string{chainRedirect}})
		}
	}
	natRedirect := Chain{Table: "nat", Name: chainRedirect}
	for _, proto := range []string{"udp", "tcp"} {
		// REDIRECT on OUTPUT rewrites the destination to 127.0.0.1 (IPv4)
		// or ::1 (IPv6), where the agent listens.
		natRedirect.Rules = append(natRedirect.Rules, Rule{Match: []string{"-p", proto},
			Comment: "to the agent over " + proto, Target: []string{"REDIRECT", "--to-ports", port}})
	}

	rs.Chains = []Chain{rawPre, rawOut, natOut, natRedirect}
	for i := range rs.Chains {
		c := &rs.Chains[i]
		for j := range c.Rules {
			c.Rules[j].Table, c.Rules[j].Chain = c.Table, c.Name
		}
	}
	return rs
}

// owner is one uid or gid of the agent as an owner match.
type owner struct {
	name  string // "uid 1337"
	match []string
}

func ownerMatches(cfg Config) []owner {
	var out []owner
	for _, u := range dedupe(cfg.ProxyUIDs) {
		s := strconv.FormatUint(uint64(u), 10)
		out = append(out, owner{name: "uid " + s, match: []string{"-m", "owner", "--uid-owner", s}})
	}
	for _, g := range dedupe(cfg.ProxyGIDs) {
		s := strconv.FormatUint(uint64(g), 10)
		out = append(out, owner{name: "gid " + s, match: []string{"-m", "owner", "--gid-owner", s}})
	}
	return out
}

// hostPrefixes returns the addresses of family f as host prefixes in the
// form iptables-save prints (198.51.100.1/32, 2001:db8::1/128), without
// duplicates, in input order. A zone (fe80::1%eth0) cannot be written in an
// iptables rule and is dropped; the address alone still matches.
func hostPrefixes(addrs []netip.Addr, f Family) []string {
	seen := map[netip.Addr]bool{}
	var out []string
	for _, a := range addrs {
		a = a.WithZone("").Unmap()
		if !a.IsValid() || a.Is4() != (f == IPv4) || seen[a] {
			continue
		}
		seen[a] = true
		out = append(out, netip.PrefixFrom(a, a.BitLen()).String())
	}
	return out
}

func dedupe(ids []uint32) []uint32 {
	seen := map[uint32]bool{}
	var out []uint32
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

func concat(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}
