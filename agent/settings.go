package agent

import (
	"errors"
	"fmt"

	"github.com/meshdns/meshdns/agent/ingest"
	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/policy"
	"github.com/meshdns/meshdns/pkg/proxy"
	"github.com/meshdns/meshdns/pkg/proxy/upstream"
)

// The settings a version carries (namewire.AgentSettings) take effect
// with its names. Ingest converts them with convertSettings before the
// version's table is made (an error NACKs it and the last good version
// keeps serving) and publishes the version whole, table and converted
// settings, once it is served; serve hands each part to its owner.

// settings are one version's settings converted for their owners. The
// zero value sets nothing: no policy, no forwarding rules, no say in the
// query log, the failing-names report off.
type settings struct {
	policy *proxy.Policy    // or nil: allow everything
	routes *upstream.Routes // or nil: no forwarding rules
	// queryLog is the settings' say in the query log (querylogsources.go).
	queryLog queryLogPatch
	failing  *namewire.FailingReport // or nil: off
}

// served is a version as the agent serves it: ingest's served value with
// its settings converted.
type served = ingest.Served[settings]

// convertSettings converts s (nil: none) for their owners; an error
// rejects the version that carries them. It is a pure function of s.
func convertSettings(s *namewire.AgentSettings) (settings, error) {
	if s == nil {
		return settings{}, nil
	}
	pol, err := convertPolicy(s.Policy)
	if err != nil {
		return settings{}, err
	}
	routes, err := convertForwarding(s.Forwarding)
	if err != nil {
		return settings{}, err
	}
	ql, err := queryLogFromSettings(s.Telemetry)
	if err != nil {
		return settings{}, err
	}
	return settings{policy: pol, routes: routes, queryLog: ql, failing: failingReportOf(s)}, nil
}

// serve makes s the version the DNS server answers from, each part of its
// settings handed to its owner: ingest publishes every version served
// here, once. The policy goes to the DNS server in the same atomic store
// as the names. The pod zone (PodZone) needs nothing here: ingest built
// the table for it.
func (a *Agent) serve(s *served) {
	st := s.Settings
	a.run.resolver.SetRoutes(st.routes) // before the names: a new name never asks an old route
	a.run.server.SetTablePolicy(s.Table, st.policy)
	a.qlSources.update(func(q *queryLogSources) { q.settings = st.queryLog })
	a.setFailingReport(st.failing)
}

// errPolicy wraps every policy the agent cannot enforce.
var errPolicy = errors.New("invalid DNS policy")

// convertPolicy compiles the protocol's DNSPolicy for the DNS server;
// nil for none. More rules than policy.MaxRules, a rule without an
// action, or a pattern pkg/policy rejects (one over
// policy.MaxPatternLength among them) fails the whole policy: enforcing
// part of it could allow what the rest denies.
func convertPolicy(p *namewire.DNSPolicy) (*proxy.Policy, error) {
	if p == nil {
		return nil, nil
	}
	// The control plane bounds what it sends, but it may be older or
	// wrong: a policy over the CRD's limits could outgrow the sidecar's
	// memory. Refused before anything is made for its rules.
	if err := policy.CheckRules(len(p.Rules)); err != nil {
		return nil, fmt.Errorf("%w: %w", errPolicy, err)
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
