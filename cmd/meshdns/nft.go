package main

import (
	"fmt"
	"io"
	"log/slog"
	"os/exec"

	"github.com/meshdns/meshdns/cmd/internal/captureflags"
	"github.com/meshdns/meshdns/iptables"
	"github.com/meshdns/meshdns/iptables/nft"
)

// useNative reports whether `meshdns iptables` writes with the native
// backend: when asked to, or with auto when neither iptables-legacy-save
// nor iptables-nft-save is installed (the meshdns image ships no iptables
// binaries). Installed tools that fail (no privilege) keep the iptables
// backends, whose errors say what is wrong.
func useNative(backend string) bool {
	switch backend {
	case captureflags.BackendNative:
		return true
	case "", string(iptables.Auto):
		for _, tool := range []string{"iptables-legacy-save", "iptables-nft-save"} {
			if _, err := exec.LookPath(tool); err == nil {
				return false
			}
		}
		return true
	}
	return false
}

// nftConfig is cfg for the native backend.
func nftConfig(cfg iptables.Config, logger *slog.Logger) nft.Config {
	return nft.Config{ProxyPort: cfg.ProxyPort, ProxyUIDs: cfg.ProxyUIDs, ProxyGIDs: cfg.ProxyGIDs,
		Nameservers: cfg.Nameservers, CaptureAllDNS: cfg.CaptureAllDNS, DisableIPv6: cfg.DisableIPv6, Logger: logger}
}

// runNative carries out action with the native backend. print and
// --dry-run show the tables in nft's syntax: apply replaces the meshdns
// tables whole, so the tables are the transaction.
func runNative(action string, dryRun bool, cfg nft.Config, stdout io.Writer) error {
	switch {
	case action == "print" || (action == "apply" && dryRun):
		for _, f := range families(cfg) {
			fmt.Fprint(stdout, nft.Render(nft.Build(cfg, f), f))
		}
		return nil
	case action == "apply":
		return nft.Apply(cfg)
	case dryRun:
		for _, f := range families(cfg) {
			fmt.Fprintf(stdout, "delete table %s %s\n", map[iptables.Family]string{iptables.IPv4: "ip", iptables.IPv6: "ip6"}[f], nft.TableName)
		}
		return nil
	}
	return nft.Clean(cfg)
}

func families(cfg nft.Config) []iptables.Family {
	if cfg.DisableIPv6 {
		return []iptables.Family{iptables.IPv4}
	}
	return []iptables.Family{iptables.IPv4, iptables.IPv6}
}

// cleanNative removes the native tables when clean runs with auto on a
// host whose iptables tools work, so rules written by either backend go, as
// clean promises. Where the tables cannot be listed (no privilege, a
// kernel without nf_tables) none of ours can exist either.
func cleanNative(cfg nft.Config) error {
	if tables, err := nft.Installed(cfg); err != nil || len(tables) == 0 {
		return nil
	}
	return nft.Clean(cfg)
}
