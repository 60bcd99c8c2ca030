package main

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"

	"github.com/meshdns/meshdns/iptables"
)

// ruleFlags are the flag values that describe the capture rules. Both
// `meshdns iptables` and the agent's drift check (agent.go) build their
// iptables.Config with config, so the agent checks exactly the rules the
// init container applied.
type ruleFlags struct {
	prefix     string // of the flag names in errors: "" or "iptables-"
	port       uint16
	uids, gids stringList
	resolvConf string // nameservers to capture; "" reads none
	captureAll bool
	backend    string
	noIPv6     bool
}

// config checks the values and reads the nameservers of resolvConf unless
// every port 53 packet is captured.
func (f ruleFlags) config() (iptables.Config, error) {
	if f.prefix != "" && f.backend == backendNative {
		return iptables.Config{}, fmt.Errorf("--%sbackend %s: the drift check reads the rules with the iptables tools; use auto, legacy or nft", f.prefix, backendNative)
	}
	b, err := parseBackend(f.backend)
	if err != nil {
		return iptables.Config{}, err
	}
	cfg := iptables.Config{ProxyPort: f.port, CaptureAllDNS: f.captureAll, Backend: b, DisableIPv6: f.noIPv6}
	if cfg.ProxyUIDs, err = parseIDs(f.prefix+"proxy-uid", f.uids); err != nil {
		return cfg, err
	}
	if cfg.ProxyGIDs, err = parseIDs(f.prefix+"proxy-gid", f.gids); err != nil {
		return cfg, err
	}
	if f.resolvConf != "" && !f.captureAll {
		if cfg.Nameservers, err = readNameservers(f.resolvConf); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

func parseIDs(flagName string, ids stringList) ([]uint32, error) {
	var out []uint32
	for _, s := range ids {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return nil, usagef("--%s %q: not a numeric id", flagName, s)
		}
		out = append(out, uint32(n))
	}
	return out, nil
}

func readNameservers(path string) ([]netip.Addr, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--resolv-conf %s: %w", path, pathError(err))
	}
	defer f.Close()
	ns, err := iptables.ParseResolvConf(f)
	if err != nil {
		return nil, fmt.Errorf("--resolv-conf %s: %w", path, err)
	}
	if len(ns) == 0 {
		return nil, fmt.Errorf("--resolv-conf %s: %w", path, iptables.ErrNoNameservers)
	}
	return ns, nil
}

// backendNative is the --backend value of the nftables rules written over
// netlink (package iptables/nft): no iptables or nft binary is needed, so
// the init container runs from the static binary alone.
const backendNative = "native"

// parseBackend accepts the iptables backends and native; native maps to
// Auto for the iptables.Config, which is then not used to write rules.
func parseBackend(s string) (iptables.Backend, error) {
	if s == backendNative {
		return iptables.Auto, nil
	}
	b, err := iptables.ParseBackend(s)
	if err != nil {
		return "", fmt.Errorf("%w (or %s)", err, backendNative)
	}
	return b, nil
}
