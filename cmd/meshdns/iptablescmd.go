package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/meshdns/meshdns/cmd/internal/captureflags"
	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/iptables"
)

// The iptables command is the init container's, which runs the full
// binary: meshdns-agent leaves it out, and with it the nftables code of the
// native backend (iptables/nft) that every pod's agent would otherwise map
// for nothing. The agent's own drift check (captureflags.Rules, as here)
// reads the rules with the iptables tools.
func init() {
	cli.Register("iptables", cli.Command{
		Summary: "install (apply), remove (clean) or show (print) the DNS capture rules",
		Usage:   iptablesUsage,
		Run:     runIPTables,
	})
}

const iptablesUsage = `usage: meshdns iptables apply|clean|print [flags]

  apply  install the rules (one iptables-restore transaction per family; idempotent)
  clean  remove every rule and chain of meshdns, and nothing else
  print  show the iptables-restore input apply would run`

func runIPTables(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("iptables", flag.ContinueOnError)
	fs.SetOutput(stdout)
	var (
		uids, gids cli.StringList
		port       = fs.Uint("proxy-port", iptables.DefaultProxyPort, "the agent's DNS port on 127.0.0.1 and ::1 (UDP and TCP)")
		resolvConf = fs.String("resolv-conf", "/etc/resolv.conf", "only DNS to the nameservers listed here is redirected")
		captureAll = fs.Bool("capture-all-dns", false, "redirect all port 53 traffic, whatever the destination")
		backend    = fs.String("backend", "auto", "auto, legacy, nft (iptables-nft) or native (nftables over netlink, no binaries)")
		dryRun     = fs.Bool("dry-run", false, "print what apply or clean would run instead of running it")
		noIPv6     = fs.Bool("disable-ipv6", false, "write IPv4 rules only (hosts without ip6tables)")
	)
	logs := cli.NewLogFlags(fs, "debug, info, warn or error")
	fs.Var(&uids, "proxy-uid", "the agent's uid; its own queries bypass the redirect (repeatable)")
	fs.Var(&gids, "proxy-gid", "the agent's gid; its own queries bypass the redirect (repeatable)")

	if len(args) == 0 {
		return cli.Usagef("no action given (want apply, clean or print)")
	}
	if args[0] == "-h" || args[0] == "-help" || args[0] == "--help" || args[0] == "help" {
		cli.PrintHelp(stdout, fs)
		return flag.ErrHelp
	}
	action := args[0]
	if action != "apply" && action != "clean" && action != "print" {
		return cli.Usagef("unknown action %q (want apply, clean or print)", action)
	}
	if err := cli.ParseFlags(fs, args[1:], nil); err != nil {
		return err
	}
	if *port == 0 || *port > 65535 {
		return cli.Usagef("--proxy-port %d out of range", *port)
	}
	rf := captureflags.Rules{Port: uint16(*port), UIDs: uids, GIDs: gids, ResolvConf: *resolvConf,
		CaptureAll: *captureAll, Backend: *backend, NoIPv6: *noIPv6}
	if action == "clean" {
		// Clean needs no nameservers; apply and print do unless every port
		// 53 packet is captured anyway.
		rf.ResolvConf = ""
	}
	if action != "clean" && len(uids) == 0 && len(gids) == 0 {
		return &cli.UsageError{Err: iptables.ErrNoProxyOwner}
	}
	if _, err := captureflags.ParseBackend(*backend); err != nil {
		return cli.Usagef("--backend %q: %v", *backend, err)
	}
	cfg, err := rf.Config()
	if err != nil {
		return err
	}
	if cfg.Logger, _, err = logs.Logger(stderr); err != nil {
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
