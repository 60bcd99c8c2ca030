package policysource

import (
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/policy"
)

// validate checks what the schema checks (the file form has no API server
// in front of it) and what it cannot: the same pattern twice in another
// case or spelling, and that pkg/policy compiles the result.
func validate(o object) (Policy, error) {
	ns := o.Namespace
	if ns == "" {
		ns = "default"
	}
	where := fmt.Sprintf("DNSPolicy %s/%s", ns, o.Name)
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf(format, a...)) }
	switch {
	case o.APIVersion != APIVersion || o.Kind != Kind:
		add("apiVersion/kind %q/%q, want %q/%q", o.APIVersion, o.Kind, APIVersion, Kind)
	case o.Name == "":
		add("metadata.name: required")
	case o.Spec == nil:
		add("spec: required")
	}
	if len(errs) > 0 {
		return Policy{}, fmt.Errorf("%s: %w", where, errors.Join(errs...))
	}
	s := o.Spec
	source := ns + "/" + o.Name
	p := Policy{Namespace: ns, Name: o.Name, Generation: o.Generation, Created: o.CreationTimestamp.Time,
		Selector: labels.Everything()}
	if s.PodSelector != nil {
		sel, err := metav1.LabelSelectorAsSelector(s.PodSelector)
		if err != nil {
			add("spec.podSelector: %w", err)
		} else {
			p.Selector = sel
		}
	}
	d := &p.DNS
	d.Source = source
	var err error
	if d.OutsideDefault, err = action(s.OutsideDefault, true); err != nil {
		add("spec.outsideDefault: %w", err)
	}
	if d.TableDefault, err = action(s.TableDefault, true); err != nil {
		add("spec.tableDefault: %w", err)
	}
	switch s.DenyResponse {
	case "", "NXDOMAIN":
		d.DenyResponse = namewire.DenyResponseNXDOMAIN
	case "REFUSED":
		d.DenyResponse = namewire.DenyResponseRefused
	default:
		add("spec.denyResponse: %q is not NXDOMAIN or REFUSED", s.DenyResponse)
	}
	switch s.Mode {
	case "", "Enforce":
		d.Mode = namewire.PolicyModeEnforce
	case "Audit":
		d.Mode = namewire.PolicyModeAudit
	default:
		add("spec.mode: %q is not Enforce or Audit", s.Mode)
	}
	rules := s.Rules
	if err := policy.CheckRules(len(rules)); err != nil {
		add("spec.rules: %w", err)
		rules = nil // one error, not one per rule
	}
	seen := make(map[string]int, len(rules)) // canonical pattern -> first rule index
	for i, r := range rules {
		a, err := action(r.Action, false)
		if err != nil {
			add("spec.rules[%d].action: %w", i, err)
		}
		name, wild, err := policy.ParsePattern(r.Pattern)
		if err != nil {
			add("spec.rules[%d].pattern: %w", i, err)
			continue
		}
		canon := name + "."
		if wild {
			canon = "*." + canon
		}
		if j, dup := seen[canon]; dup {
			what := "a duplicate of"
			if s.Rules[j].Action != r.Action {
				what = "in conflict with"
			}
			add("spec.rules[%d]: pattern %q (%s %s) is %s spec.rules[%d] (%q %s)", i, r.Pattern, canon, r.Action, what, j, s.Rules[j].Pattern, s.Rules[j].Action)
			continue
		}
		seen[canon] = i
		d.Rules = append(d.Rules, namewire.PolicyRule{Pattern: canon, Action: a, Source: source})
	}
	if len(errs) == 0 {
		if _, err := policy.New(compile(d)); err != nil {
			add("%w", err) // a check above is missing: never send it
		}
	}
	if len(errs) > 0 {
		return Policy{}, fmt.Errorf("%s: %w", where, errors.Join(errs...))
	}
	return p, nil
}

// action maps the CRD's enum; "" is Allow only where the schema defaults
// it.
func action(s string, defaulted bool) (namewire.PolicyAction, error) {
	switch {
	case s == "Allow", s == "" && defaulted:
		return namewire.PolicyActionAllow, nil
	case s == "Deny":
		return namewire.PolicyActionDeny, nil
	case s == "":
		return 0, errors.New("required: Allow or Deny")
	}
	return 0, fmt.Errorf("%q is not Allow or Deny", s)
}

// compile maps a protocol policy to pkg/policy's Config (what an agent
// does with what it is sent). Unspecified enum values take the protocol's
// documented defaults.
func compile(d *namewire.DNSPolicy) policy.Config {
	cfg := policy.Config{
		OutsideDefault: domainAction(d.OutsideDefault),
		TableDefault:   domainAction(d.TableDefault),
	}
	if d.DenyResponse == namewire.DenyResponseRefused {
		cfg.DenyResponse = policy.Refused
	}
	if d.Mode == namewire.PolicyModeAudit {
		cfg.Mode = policy.Audit
	}
	cfg.Rules = make([]policy.Rule, len(d.Rules))
	for i, r := range d.Rules {
		cfg.Rules[i] = policy.Rule{Pattern: r.Pattern, Action: domainAction(r.Action)}
	}
	return cfg
}

func domainAction(a namewire.PolicyAction) policy.Action {
	if a == namewire.PolicyActionDeny {
		return policy.Deny
	}
	return policy.Allow
}

// String describes p in one line for logs and validate's output.
func (p Policy) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "DNSPolicy %s/%s: %d rules, outside %s, table %s, %s, %s, pods %q", p.Namespace, p.Name, len(p.DNS.Rules),
		p.DNS.OutsideDefault, p.DNS.TableDefault, p.DNS.DenyResponse, p.DNS.Mode, p.Selector.String())
	return b.String()
}
