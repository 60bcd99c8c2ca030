package agent

import (
	"errors"
	"fmt"
	"sync"

	"github.com/meshdns/meshdns/agent/ingest"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/nametable"
	"github.com/meshdns/meshdns/pkg/policy"
	"github.com/meshdns/meshdns/pkg/proxy"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// The settings a version carries (namewire.AgentSettings) take effect
// with its names: checkSettings runs before a version is applied (an
// error NACKs it and the last good version keeps serving), publish when
// its table is swapped in, handing each part to its owner.

// settings converts a version's settings once and keeps what publish
// hands over: the serving version's conversion and the one checked last
// (the next version, or one rejected later), keyed by the settings
// pointer a version keeps.
type settings struct {
	mu               sync.Mutex // guards following
	serving, pending *preparedSettings
}

// preparedSettings are one version's settings converted for their owners.
type preparedSettings struct {
	from   *namewire.AgentSettings
	policy *proxy.Policy    // or nil: allow everything
	routes *upstream.Routes // or nil: no forwarding rules
	// queryLog is the settings' say in the query log (querylogsources.go).
	queryLog queryLogPatch
}

// checkSettings converts the settings of v, a version about to be
// applied; an error rejects the version.
func (a *Agent) checkSettings(v ingest.Version) error {
	sv, ok := v.(ingest.Settings)
	if !ok {
		return nil
	}
	_, err := a.settings.prepare(sv.Settings())
	return err
}

// publish swaps in the table t with the settings of the version it was
// built from, each part handed to its owner. The policy goes to the DNS
// server in the same atomic store as the names.
func (a *Agent) publish(t *nametable.Table) {
	// Ingest stores the version before it publishes its table, and
	// publishes the serving table again before a build (to drop its answer
	// cache): either way the current version is t's.
	cur := a.tables.Current()
	if cur == nil || cur.Table != t {
		a.server.SetTable(t) // keeps the policy in force
		return
	}
	s := cur.Settings()
	p, err := a.settings.prepare(s)
	if err != nil {
		// checkSettings accepted these settings and converting is a pure
		// function of them: a bug. Keep the policy in force.
		a.log.Error("settings of the served version no longer convert", "err", err)
		a.server.SetTable(t)
		return
	}
	a.resolver.SetRoutes(p.routes) // before the names: a new name never asks an old route
	a.server.SetTablePolicy(t, p.policy)
	a.qlSources.update(func(q *queryLogSources) { q.settings = p.queryLog })
	a.settings.serve(p)
	a.setFailingReport(failingReportOf(s))
	// The pod zone (PodZone) needs nothing here: ingest built t for it.
}

// prepare converts s, or returns the conversion made for the same
// settings before.
func (st *settings) prepare(s *namewire.AgentSettings) (*preparedSettings, error) {
	if s == nil {
		return &preparedSettings{}, nil
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, p := range []*preparedSettings{st.serving, st.pending} {
		if p != nil && p.from == s {
			return p, nil
		}
	}
	pol, err := convertPolicy(s.Policy)
	if err != nil {
		return nil, err
	}
	routes, err := convertForwarding(s.Forwarding)
	if err != nil {
		return nil, err
	}
	ql, err := queryLogFromSettings(s.Telemetry)
	if err != nil {
		return nil, err
	}
	st.pending = &preparedSettings{from: s, policy: pol, routes: routes, queryLog: ql}
	return st.pending, nil
}

// serve notes p as the serving version's conversion.
func (st *settings) serve(p *preparedSettings) {
	st.mu.Lock()
	st.serving = p
	st.mu.Unlock()
}

// errPolicy wraps every policy the agent cannot enforce.
var errPolicy = errors.New("invalid DNS policy")

// convertPolicy compiles the protocol's DNSPolicy for the DNS server;
// nil for none. A rule without an action, or a pattern pkg/policy
// rejects, fails the whole policy: enforcing part of it could allow what
// the rest denies.
func convertPolicy(p *namewire.DNSPolicy) (*proxy.Policy, error) {
	if p == nil {
		return nil, nil
	}
	cfg := policy.Config{Rules: make([]policy.Rule, len(p.Rules))}
	sources := make([]string, len(p.Rules))
	var errs []error
	for i, r := range p.Rules {
		act, err := convertAction(r.Action, false)
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %d (%q): %w", i, r.Pattern, err))
		}
		cfg.Rules[i] = policy.Rule{Pattern: r.Pattern, Action: act}
		sources[i] = r.Source
		if sources[i] == "" {
			sources[i] = p.Source
		}
	}
	var err error
	if cfg.OutsideDefault, err = convertAction(p.OutsideDefault, true); err != nil {
		errs = append(errs, fmt.Errorf("outside_default: %w", err))
	}
	if cfg.TableDefault, err = convertAction(p.TableDefault, true); err != nil {
		errs = append(errs, fmt.Errorf("table_default: %w", err))
	}
	switch p.DenyResponse {
	case namewire.DenyResponseUnspecified, namewire.DenyResponseNXDOMAIN:
		cfg.DenyResponse = policy.NXDOMAIN
	case namewire.DenyResponseRefused:
		cfg.DenyResponse = policy.Refused
	default:
		errs = append(errs, fmt.Errorf("deny_response %d unknown", p.DenyResponse))
	}
	switch p.Mode {
	case namewire.PolicyModeUnspecified, namewire.PolicyModeEnforce:
		cfg.Mode = policy.Enforce
	case namewire.PolicyModeAudit:
		cfg.Mode = policy.Audit
	default:
		errs = append(errs, fmt.Errorf("mode %d unknown", p.Mode))
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%w: %w", errPolicy, errors.Join(errs...))
	}
	out, err := proxy.NewPolicy(cfg, sources)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errPolicy, err)
	}
	return out, nil
}

// convertAction maps a protocol action; unspecified is allowed for a
// default (allow) and not for a rule.
func convertAction(a namewire.PolicyAction, isDefault bool) (policy.Action, error) {
	switch {
	case a == namewire.PolicyActionAllow, a == namewire.PolicyActionUnspecified && isDefault:
		return policy.Allow, nil
	case a == namewire.PolicyActionDeny:
		return policy.Deny, nil
	}
	return policy.Allow, fmt.Errorf("action %s not allow or deny", a)
}

// failingReportOf returns the failing-names report of s, or nil.
func failingReportOf(s *namewire.AgentSettings) *namewire.FailingReport {
	if s == nil || s.Telemetry == nil {
		return nil
	}
	return s.Telemetry.FailingReport
}
