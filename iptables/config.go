package iptables

import (
	"fmt"
	"log/slog"
	"net/netip"
)

// Family is the IP version a rule set is for; each family has its own
// iptables binaries (iptables-*, ip6tables-*) and its own transaction.
type Family int

const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	if f == IPv6 {
		return "ipv6"
	}
	return "ipv4"
}

// Backend names the iptables implementation the rules are written with.
type Backend string

const (
	// Auto picks legacy or nft the way kube-proxy's iptables-wrapper does:
	// whichever already holds more rules, nft when tied (see Detect).
	Auto Backend = "auto"
	// Legacy is the x_tables kernel interface (iptables-legacy-*).
	Legacy Backend = "legacy"
	// NFT is iptables over nf_tables (iptables-nft-*).
	NFT Backend = "nft"
)

// ParseBackend accepts "auto", "legacy" and "nft"; the empty string is Auto.
func ParseBackend(s string) (Backend, error) {
	switch b := Backend(s); b {
	case "", Auto:
		return Auto, nil
	case Legacy, NFT:
		return b, nil
	}
	return "", fmt.Errorf("unknown iptables backend %q (want auto, legacy or nft)", s)
}

// binary returns the name of tool ("save" or "restore") for this backend
// and family, such as ip6tables-nft-restore.
func (b Backend) binary(f Family, tool string) string {
	prefix := "iptables"
	if f == IPv6 {
		prefix = "ip6tables"
	}
	return prefix + "-" + string(b) + "-" + tool
}

// DefaultProxyPort is where the agent listens for DNS (docs/design.md, Ports).
const DefaultProxyPort = 15053

// Config describes the capture. The zero value is not usable: it needs at
// least one proxy uid or gid, and nameservers unless CaptureAllDNS is set.
type Config struct {
	// ProxyPort is the agent's DNS port on 127.0.0.1 and ::1, UDP and TCP.
	// Zero means DefaultProxyPort.
	ProxyPort uint16
	// ProxyUIDs and ProxyGIDs are the agent's user and group ids: packets
	// sent by processes running as them are never redirected, so the
	// agent's own upstream queries reach the nameservers. At least one of
	// the two lists must be non-empty, or the agent would query itself.
	ProxyUIDs []uint32
	ProxyGIDs []uint32
	// Nameservers are the addresses whose port 53 is redirected, usually
	// the nameserver lines of the pod's resolv.conf (ParseResolvConf).
	// IPv4 addresses go to the IPv4 rules and IPv6 ones to the IPv6 rules.
	// Ignored when CaptureAllDNS is set.
	Nameservers []netip.Addr
	// CaptureAllDNS redirects all port 53 traffic whatever its destination,
	// for when the nameservers cannot be known in advance.
	CaptureAllDNS bool
	// Backend is Auto (the zero value, "" means Auto), Legacy or NFT.
	Backend Backend
	// DisableIPv6 skips the IPv6 rules, for hosts without ip6tables
	// support. By default both families are written.
	DisableIPv6 bool
	// Runner runs the iptables binaries; nil means ExecRunner{}. Tests pass
	// a fake, or an ExecRunner with an "ip netns exec NAME" prefix.
	Runner Runner
	// Logger receives one line per transaction; nil discards.
	Logger *slog.Logger
}

// withDefaults returns a copy of cfg with zero values replaced and the
// inputs checked.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.ProxyPort == 0 {
		cfg.ProxyPort = DefaultProxyPort
	}
	if cfg.Backend == "" {
		cfg.Backend = Auto
	}
	if _, err := ParseBackend(string(cfg.Backend)); err != nil {
		return cfg, err
	}
	if err := CheckCapture(cfg.ProxyUIDs, cfg.ProxyGIDs, cfg.Nameservers, cfg.CaptureAllDNS); err != nil {
		return cfg, err
	}
	if cfg.Runner == nil {
		cfg.Runner = ExecRunner{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// CheckCapture checks what every backend needs of a capture (see Config):
// an owner whose packets bypass it, and nameservers unless all DNS is
// captured, each a valid address.
func CheckCapture(uids, gids []uint32, nameservers []netip.Addr, captureAll bool) error {
	if len(uids) == 0 && len(gids) == 0 {
		return ErrNoProxyOwner
	}
	if !captureAll && len(nameservers) == 0 {
		return ErrNoNameservers
	}
	for _, ns := range nameservers {
		if !ns.IsValid() {
			return fmt.Errorf("invalid nameserver address %v", ns)
		}
	}
	return nil
}

// families returns the families the rules are written for.
func (cfg Config) families() []Family {
	if cfg.DisableIPv6 {
		return []Family{IPv4}
	}
	return []Family{IPv4, IPv6}
}
