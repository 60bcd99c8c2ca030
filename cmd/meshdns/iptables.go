package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"

	"github.com/meshdns/meshdns/iptables"
)

func init() {
	commands["iptables"] = command{
		summary: "install (apply), remove (clean) or show (print) the DNS capture rules",
		usage:   iptablesUsage,
		run:     runIPTables,
	}
}

const iptablesUsage = `usage: meshdns iptables apply|clean|print [flags]

  apply  install the rules (one iptables-restore transaction per family; idempotent)
  clean  remove every rule and chain of meshdns, and nothing else
  print  show the iptables-restore input apply would run`

func runIPTables(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("iptables", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var (
		uids, gids stringList
		port       = fs.Uint("proxy-port", iptables.DefaultProxyPort, "the agent's DNS port on 127.0.0.1 and ::1 (UDP and TCP)")
		resolvConf = fs.String("resolv-conf", "/etc/resolv.conf", "only DNS to the nameservers listed here is redirected")
		captureAll = fs.Bool("capture-all-dns", false, "redirect all port 53 traffic, whatever the destination")
		backend    = fs.String("backend", "auto", "auto, legacy, nft (iptables-nft) or native (nftables over netlink, no binaries)")
		dryRun     = fs.Bool("dry-run", false, "print what apply or clean would run instead of running it")
		noIPv6     = fs.Bool("disable-ipv6", false, "write IPv4 rules only (hosts without ip6tables)")
	)
	logs := newLogFlags(fs, "debug, info, warn or error")
	fs.Var(&uids, "proxy-uid", "the agent's uid; its own queries bypass the redirect (repeatable)")
	fs.Var(&gids, "proxy-gid", "the agent's gid; its own queries bypass the redirect (repeatable)")

	if len(args) == 0 {
		return usagef("no action given (want apply, clean or print)")
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		printHelp(stdout, fs)
		return flag.ErrHelp
	}
	action := args[0]
	if action != "apply" && action != "clean" && action != "print" {
		return usagef("unknown action %q (want apply, clean or print)", action)
	}
	if err := parseFlags(fs, args[1:], nil); err != nil {
		return err
	}
	if *port == 0 || *port > 65535 {
		return usagef("--proxy-port %d out of range", *port)
	}
	rf := ruleFlags{port: uint16(*port), uids: uids, gids: gids, resolvConf: *resolvConf,
		captureAll: *captureAll, backend: *backend, noIPv6: *noIPv6}
	if action == "clean" {
		// Clean needs no nameservers; apply and print do unless every port
		// 53 packet is captured anyway.
		rf.resolvConf = ""
	}
	cfg, err := rf.config()
	if err != nil {
		return err
	}
	if cfg.Logger, _, err = logs.logger(stderr); err != nil {
		return err
	}
	if action == "clean" {
		// Clean removes by ownership, not by configuration: give the
		// validation what it needs without asking the user for it.
		cfg.CaptureAllDNS = true
		if len(cfg.ProxyUIDs) == 0 && len(cfg.ProxyGIDs) == 0 {
			cfg.ProxyUIDs = []uint32{0}
		}
	}
	m, err := iptables.New(cfg)
	if err != nil {
		return err
	}
	if useNative(*backend) {
		return runNative(action, *dryRun, nftConfig(cfg, cfg.Logger), stdout)
	}
	if action == "clean" && !*dryRun && *backend == string(iptables.Auto) {
		if err := cleanNative(nftConfig(cfg, cfg.Logger)); err != nil {
			return err
		}
	}

	switch {
	case action == "print":
		steps, err := m.PlanApply(ctx)
		if err != nil {
			// Without privileges or binaries the live rules cannot be
			// read; show the rules as they would go onto a clean host.
			fmt.Fprintf(stderr, "meshdns: cannot read the live rules (%v); showing the rules for a host without meshdns rules\n", err)
			steps = m.PlanOffline()
		}
		return iptables.WriteSteps(stdout, steps)
	case action == "apply" && *dryRun:
		steps, err := m.PlanApply(ctx)
		if err != nil {
			return err
		}
		return iptables.WriteSteps(stdout, steps)
	case action == "apply":
		return m.Apply(ctx)
	case *dryRun:
		steps, err := m.PlanClean(ctx)
		if err != nil {
			return err
		}
		return iptables.WriteSteps(stdout, steps)
	default:
		return m.Clean(ctx)
	}
}

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
