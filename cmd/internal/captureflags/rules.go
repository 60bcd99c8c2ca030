// Package captureflags turns the flag values that describe the DNS
// capture rules into an iptables.Config. Both `meshdns iptables` (the init
// container's command) and the agent's drift check build their config
// with Rules.Config, so the agent checks exactly the rules the init
// container applied.
package captureflags

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/iptables"
)

// Rules are the flag values that describe the capture rules.
type Rules struct {
	Prefix     string // of the flag names in errors: "" or "iptables-"
	Port       uint16
	UIDs, GIDs cli.StringList
	ResolvConf string // nameservers to capture; "" reads none
	CaptureAll bool
	Backend    string // auto, legacy, nft or BackendNative
	NoIPv6     bool
}

// Config checks the values and reads the nameservers of ResolvConf unless
// every port 53 packet is captured.
func (f Rules) Config() (iptables.Config, error) {
	if f.Prefix != "" && f.Backend == BackendNative {
		return iptables.Config{}, fmt.Errorf("--%sbackend %s: the drift check reads the rules with the iptables tools; use auto, legacy or nft", f.Prefix, BackendNative)
	}
	b, err := ParseBackend(f.Backend)
	if err != nil {
		return iptables.Config{}, err
	}
	cfg := iptables.Config{ProxyPort: f.Port, CaptureAllDNS: f.CaptureAll, Backend: b, DisableIPv6: f.NoIPv6}
	if cfg.ProxyUIDs, err = parseIDs(f.Prefix+"proxy-uid", f.UIDs); err != nil {
		return cfg, err
	}
	if cfg.ProxyGIDs, err = parseIDs(f.Prefix+"proxy-gid", f.GIDs); err != nil {
		return cfg, err
	}
	if f.ResolvConf != "" && !f.CaptureAll {
		if cfg.Nameservers, err = readNameservers(f.ResolvConf); err != nil {
			return cfg, err
		}
	}
	return cfg, nil
}

func parseIDs(flagName string, ids cli.StringList) ([]uint32, error) {
	var out []uint32
	for _, s := range ids {
		n, err := strconv.ParseUint(s, 10, 32)
		if err != nil {
			return nil, cli.Usagef("--%s %q: not a numeric id", flagName, s)
		}
		out = append(out, uint32(n))
	}
	return out, nil
}

func readNameservers(path string) ([]netip.Addr, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--resolv-conf %s: %w", path, cli.PathError(err))
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

// BackendNative is the --backend value of the nftables rules written over
// netlink (package iptables/nft): no iptables or nft binary is needed, so
// the init container runs from the static binary alone.
const BackendNative = "native"

// ParseBackend accepts the iptables backends and native; native maps to
// Auto for the iptables.Config, which is then not used to write rules.
func ParseBackend(s string) (iptables.Backend, error) {
	if s == BackendNative {
		return iptables.Auto, nil
	}
	b, err := iptables.ParseBackend(s)
	if err != nil {
		return "", fmt.Errorf("%w (or %s)", err, BackendNative)
	}
	return b, nil
}
