// Package iptables makes a pod's DNS traffic reach the meshdns agent
// without any change to the application: nat rules redirect UDP and TCP
// port 53 sent to the pod's nameservers to the agent's port on the
// loopback address, the agent's own uid and gid are exempt so its upstream
// queries leave the pod, and raw-table conntrack zones keep the two UDP
// flows apart (see the zone constants in rules.go).
//
// The rules are a declarative model (Build) rendered to iptables-restore
// input (ApplyInput, CleanInput) and applied with one
// iptables-restore --noflush transaction per IP family. Everything of ours
// lives in chains named MESHDNS_* plus one jump per built-in chain, each
// rule carrying an owner comment, so Apply is idempotent and Clean removes
// exactly what is ours. Check compares the live rules with the model for
// drift reporting.
//
// The package uses the standard library only (a test enforces it): it runs
// the iptables binaries and knows nothing about DNS messages.
package iptables

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
)

// restoreWait is how long iptables-restore waits for the xtables lock held
// by another writer (kube-proxy, a CNI plugin) before failing; seconds.
const restoreWait = "10"

// Manager applies, removes and checks the rules of one Config.
type Manager struct {
	cfg Config

	mu      sync.Mutex // guards following
	backend Backend    // resolved backend; "" until the first detection
}

// New checks cfg and returns a Manager. It runs nothing; the backend is
// detected on first use.
func New(cfg Config) (*Manager, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	return &Manager{cfg: cfg}, nil
}

// Backend returns the backend in use, detecting it on the first call when
// the configuration says Auto.
func (m *Manager) Backend(ctx context.Context) (Backend, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.backend != "" {
		return m.backend, nil
	}
	if m.cfg.Backend != Auto {
		m.backend = m.cfg.Backend
		return m.backend, nil
	}
	b, err := Detect(ctx, m.cfg.Runner)
	if err != nil {
		return "", err
	}
	m.cfg.Logger.Debug("iptables backend detected", "backend", string(b))
	m.backend = b
	return b, nil
}

// Ruleset returns the rules wanted for family f.
func (m *Manager) Ruleset(f Family) Ruleset { return Build(m.cfg, f) }

// Step is one iptables-restore run: the command line and its input.
type Step struct {
	Family  Family
	Backend Backend
	Command []string
	Input   string
}

func restoreStep(b Backend, f Family, input string) Step {
	return Step{Family: f, Backend: b, Input: input,
		Command: []string{b.binary(f, "restore"), "--noflush", "--wait=" + restoreWait}}
}

// PlanApply reads the live rules and returns the transactions Apply would
// run, one per family.
func (m *Manager) PlanApply(ctx context.Context) ([]Step, error) {
	var steps []Step
	err := m.eachLive(ctx, func(b Backend, f Family, cur Dump) {
		steps = append(steps, restoreStep(b, f, ApplyInput(Build(m.cfg, f), cur)))
	})
	if err != nil {
		return nil, err
	}
	return steps, nil
}

// eachLive reads the live rules of each family on the detected backend and
// hands them to fn, passing over a family skipFamily excuses. Planning and
// drift checks read the same rules the same way.
func (m *Manager) eachLive(ctx context.Context, fn func(b Backend, f Family, cur Dump)) error {
	b, err := m.Backend(ctx)
	if err != nil {
		return err
	}
	for _, f := range m.cfg.families() {
		cur, err := m.dump(ctx, b, f)
		if m.skipFamily(f, err) {
			continue
		}
		if err != nil {
			return err
		}
		fn(b, f, cur)
	}
	return nil
}

// skipFamily reports whether family f is left out because its tables
// cannot be read (err from dump) although nothing requires it: IPv6 on a
// node booted without IPv6 netfilter support, when no IPv6 nameserver is
// configured. Such a pod has no IPv6 DNS to capture, and failing the init
// container would keep the pod from starting. With an IPv6 nameserver the
// error stands.
func (m *Manager) skipFamily(f Family, err error) bool {
	if err == nil || f != IPv6 || len(hostPrefixes(m.cfg.Nameservers, IPv6)) > 0 {
		return false
	}
	m.cfg.Logger.Warn("skipping IPv6 rules: ip6tables does not work here and no IPv6 nameserver is configured", "err", err)
	return true
}

// PlanOffline returns what Apply would run on a host without any rules of
// ours, without running anything: for print where iptables cannot be read
// (no privileges, no binaries). Auto is shown as nft.
func (m *Manager) PlanOffline() []Step {
	b := m.cfg.Backend
	if b == Auto {
		b = NFT
	}
	var steps []Step
	for _, f := range m.cfg.families() {
		steps = append(steps, restoreStep(b, f, ApplyInput(Build(m.cfg, f), nil)))
	}
	return steps
}

// Apply installs the rules: afterwards every chain of ours holds exactly
// the wanted rules and every built-in chain exactly one jump of ours,
// however often Apply ran before.
func (m *Manager) Apply(ctx context.Context) error {
	steps, err := m.PlanApply(ctx)
	if err != nil {
		return err
	}
	return m.Run(ctx, steps)
}

// PlanClean reads the live rules and returns the transactions Clean would
// run; none when nothing of ours is installed. With Auto it looks at both
// backends, since rules may have been applied with either.
func (m *Manager) PlanClean(ctx context.Context) ([]Step, error) {
	backends := []Backend{m.cfg.Backend}
	if m.cfg.Backend == Auto {
		backends = nil
		for _, b := range []Backend{Legacy, NFT} {
			if _, ok := countRules(ctx, m.cfg.Runner, b); ok {
				backends = append(backends, b)
			}
		}
		if len(backends) == 0 {
			return nil, ErrNoBackend
		}
	}
	var steps []Step
	for _, b := range backends {
		for _, f := range m.cfg.families() {
			cur, err := m.dump(ctx, b, f)
			if f == IPv6 && err != nil {
				// Nothing can be installed where nothing can be read.
				m.cfg.Logger.Warn("skipping IPv6 clean: ip6tables does not work here", "err", err)
				continue
			}
			if err != nil {
				return nil, err
			}
			if in := CleanInput(cur); in != "" {
				steps = append(steps, restoreStep(b, f, in))
			}
		}
	}
	return steps, nil
}

// Clean removes every rule and chain of ours and nothing else.
func (m *Manager) Clean(ctx context.Context) error {
	steps, err := m.PlanClean(ctx)
	if err != nil {
		return err
	}
	return m.Run(ctx, steps)
}

// Run runs the steps in order and stops at the first failure. Each step is
// atomic per table: iptables-restore commits a table completely or not at
// all.
func (m *Manager) Run(ctx context.Context, steps []Step) error {
	for _, s := range steps {
		if _, err := m.cfg.Runner.Run(ctx, []byte(s.Input), s.Command[0], s.Command[1:]...); err != nil {
			return fmt.Errorf("apply %s rules: %w", s.Family, err)
		}
		m.cfg.Logger.Info("iptables rules written", "family", s.Family.String(), "backend", string(s.Backend),
			"lines", strings.Count(s.Input, "\n"))
	}
	return nil
}

// dump reads the live rules of one family with backend b.
func (m *Manager) dump(ctx context.Context, b Backend, f Family) (Dump, error) {
	out, err := m.cfg.Runner.Run(ctx, nil, b.binary(f, "save"))
	if err != nil {
		return nil, fmt.Errorf("read %s rules: %w", f, err)
	}
	d, err := ParseSave(string(out))
	if err != nil {
		return nil, fmt.Errorf("read %s rules: %w", f, err)
	}
	return d, nil
}

// WriteSteps prints steps for a person: each command as a comment line,
// then its input. The input part is valid iptables-restore input.
func WriteSteps(w io.Writer, steps []Step) error {
	if len(steps) == 0 {
		_, err := fmt.Fprintln(w, "# nothing to do")
		return err
	}
	for _, s := range steps {
		if _, err := fmt.Fprintf(w, "# %s (%s)\n%s", strings.Join(s.Command, " "), s.Family, s.Input); err != nil {
			return err
		}
	}
	return nil
}
