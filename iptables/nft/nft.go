// Package nft installs the DNS capture of package iptables with nftables,
// talking netlink from Go: no iptables or nft binary, no shared library, so
// the init container runs from the static meshdns binary in an image with
// nothing else in it.
//
// The rules do what the iptables backend's do (iptables/README.md): UDP
// and TCP port 53 to the pod's nameservers is redirected to the agent's
// port, the agent's uid and gid bypass the redirect, and raw-priority
// chains put the agent's and the apps' UDP flows in separate conntrack
// zones. They live in one table of our own per family (ip and ip6
// "meshdns"), with base chains hooked beside whatever other tools install:
// Apply replaces the table in one netlink transaction, so it is idempotent
// and never leaves half a ruleset; Clean deletes the table and touches
// nothing else.
package nft

import (
	"errors"
	"fmt"

	"github.com/google/nftables"

	"github.com/meshdns/meshdns/iptables"
)

// Apply installs (or replaces) the meshdns tables described by cfg, one
// transaction per family. An IPv6 table that cannot be written (a kernel
// without IPv6 nftables) is skipped with a warning when no IPv6 nameserver
// is configured, as the iptables backend does.
func Apply(cfg Config) error {
	cfg, err := cfg.forApply()
	if err != nil {
		return err
	}
	for _, f := range cfg.families() {
		err := applyFamily(cfg, f)
		if err != nil && f == iptables.IPv6 && !cfg.CaptureAllDNS && len(addrsOf(cfg.Nameservers, f)) == 0 {
			cfg.Logger.Warn("skipping IPv6 rules: ip6 nftables does not work here and no IPv6 nameserver is configured", "err", err)
			continue
		}
		if err != nil {
			return err
		}
		cfg.Logger.Info("nftables rules applied", "family", familyName(f), "table", TableName)
	}
	return nil
}

func applyFamily(cfg Config, f iptables.Family) error {
	c, err := conn(cfg)
	if err != nil {
		return err
	}
	t := &nftables.Table{Name: TableName, Family: tableFamily(f)}
	// Add, delete, add: the table exists after the first step whether or
	// not it did before, so the delete cannot fail, and the batch replaces
	// any old table atomically.
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	for _, ch := range Build(cfg, f) {
		prio := nftables.ChainPriority(ch.Priority)
		nch := c.AddChain(&nftables.Chain{Name: ch.Name, Table: t, Type: chainType(ch), Hooknum: chainHook(ch),
			Priority: &prio, Policy: policyAccept()})
		for _, r := range ch.Rules {
			c.AddRule(&nftables.Rule{Table: t, Chain: nch, Exprs: r.exprs(f), UserData: r.comment()})
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("apply nftables %s table %s: %w", familyName(f), TableName, err)
	}
	return nil
}

// Clean deletes the meshdns tables; it succeeds when there are none.
func Clean(cfg Config) error {
	cfg = cfg.withDefaults()
	var errs []error
	for _, f := range cfg.families() {
		c, err := conn(cfg)
		if err != nil {
			return err
		}
		t := &nftables.Table{Name: TableName, Family: tableFamily(f)}
		c.AddTable(t)
		c.DelTable(t)
		if err := c.Flush(); err != nil {
			if f == iptables.IPv6 {
				cfg.Logger.Warn("cannot clean the ip6 nftables table", "err", err)
				continue
			}
			errs = append(errs, fmt.Errorf("clean nftables %s table %s: %w", familyName(f), TableName, err))
		}
	}
	return errors.Join(errs...)
}

// Installed reports, per family, how many rules the live meshdns table
// holds in each chain; a missing table has no entry. Tests and print use
// it to compare the live state with Build.
func Installed(cfg Config) (map[iptables.Family]map[string]int, error) {
	cfg = cfg.withDefaults()
	c, err := conn(cfg)
	if err != nil {
		return nil, err
	}
	out := map[iptables.Family]map[string]int{}
	for _, f := range cfg.families() {
		tables, err := c.ListTablesOfFamily(tableFamily(f))
		if err != nil {
			return nil, fmt.Errorf("list nftables %s tables: %w", familyName(f), err)
		}
		var t *nftables.Table
		for _, tt := range tables {
			if tt.Name == TableName {
				t = tt
			}
		}
		if t == nil {
			continue
		}
		chains, err := c.ListChainsOfTableFamily(tableFamily(f))
		if err != nil {
			return nil, fmt.Errorf("list nftables %s chains: %w", familyName(f), err)
		}
		counts := map[string]int{}
		for _, ch := range chains {
			if ch.Table.Name != TableName {
				continue
			}
			rules, err := c.GetRules(t, ch)
			if err != nil {
				return nil, fmt.Errorf("list nftables rules of %s: %w", ch.Name, err)
			}
			counts[ch.Name] = len(rules)
		}
		out[f] = counts
	}
	return out, nil
}

func conn(cfg Config) (*nftables.Conn, error) {
	var opts []nftables.ConnOption
	if cfg.NetNS != 0 {
		opts = append(opts, nftables.WithNetNSFd(cfg.NetNS))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("open nftables netlink: %w", err)
	}
	return c, nil
}

func policyAccept() *nftables.ChainPolicy {
	p := nftables.ChainPolicyAccept
	return &p
}
