package nft

import (
	"log/slog"
	"net/netip"

	"github.com/meshdns/meshdns/iptables"
)

// TableName is the name of meshdns's table in the ip and ip6 families.
// Everything this package installs lives in it, so clean is one delete.
const TableName = "meshdns"

// Config describes the capture; the fields mean what they mean in
// iptables.Config, so both backends install the same behaviour.
type Config struct {
	// ProxyPort is the agent's DNS port on 127.0.0.1 and ::1; zero means
	// iptables.DefaultProxyPort.
	ProxyPort uint16
	// ProxyUIDs and ProxyGIDs: packets of these owners bypass the
	// redirect. At least one is required for Apply.
	ProxyUIDs []uint32
	ProxyGIDs []uint32
	// Nameservers whose port 53 is redirected, each to its family's
	// table. Ignored when CaptureAllDNS is set.
	Nameservers []netip.Addr
	// CaptureAllDNS redirects port 53 whatever the destination.
	CaptureAllDNS bool
	// DisableIPv6 writes the ip table only.
	DisableIPv6 bool
	// NetNS is an open file descriptor of the network namespace to write
	// to; zero means the caller's own (what the init container wants).
	NetNS int
	// Logger receives one line per family written; nil discards.
	Logger *slog.Logger
}

// forApply checks cfg for Apply and fills the defaults.
func (cfg Config) forApply() (Config, error) {
	cfg = cfg.withDefaults()
	return cfg, iptables.CheckCapture(cfg.ProxyUIDs, cfg.ProxyGIDs, cfg.Nameservers, cfg.CaptureAllDNS)
}

func (cfg Config) withDefaults() Config {
	if cfg.ProxyPort == 0 {
		cfg.ProxyPort = iptables.DefaultProxyPort
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg
}

func (cfg Config) families() []iptables.Family {
	if cfg.DisableIPv6 {
		return []iptables.Family{iptables.IPv4}
	}
	return []iptables.Family{iptables.IPv4, iptables.IPv6}
}
