// Package policy decides which names a workload may resolve: a DNS egress
// policy compiled once into an immutable matcher that the answer path asks
// per query without allocating. The semantics are in README.md.
package policy

import (
	"errors"
	"fmt"
	"strings"

	"github.com/meshdns/meshdns/internal/dnsname"
)

// Action is what a rule or a default does with a name.
type Action uint8

// The actions. The zero value allows, so a zero Config allows everything.
const (
	Allow Action = iota
	Deny
)

func (a Action) String() string {
	switch a {
	case Allow:
		return "allow"
	case Deny:
		return "deny"
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// Mode says whether a denial is answered or only reported.
type Mode uint8

// The modes. The zero value enforces.
const (
	Enforce Mode = iota
	// Audit decides and reports as Enforce does but answers as if every
	// name were allowed.
	Audit
)

func (m Mode) String() string {
	switch m {
	case Enforce:
		return "enforce"
	case Audit:
		return "audit"
	}
	return fmt.Sprintf("mode(%d)", uint8(m))
}

// Response is the answer to a denied name.
type Response uint8

// The responses. The zero value is NXDOMAIN: REFUSED makes musl's resolver
// stop its search-path walk, NXDOMAIN lets it try the next candidate.
const (
	NXDOMAIN Response = iota
	Refused
)

func (r Response) String() string {
	switch r {
	case NXDOMAIN:
		return "NXDOMAIN"
	case Refused:
		return "REFUSED"
	}
	return fmt.Sprintf("response(%d)", uint8(r))
}

// Rule is one pattern and its action.
type Rule struct {
	// Pattern is an exact name ("api.stripe.com") or "*." and a domain
	// ("*.s3.amazonaws.com": every name strictly below the domain, not
	// the domain itself). Any case; the trailing dot is optional.
	Pattern string
	Action  Action
}

// Config is a policy before it is compiled. Every zero value is the
// permissive or documented default.
type Config struct {
	// Rules, in any order: precedence is by specificity (see Decide),
	// not by position. The index of a rule in Rules is what a Decision
	// names.
	Rules []Rule
	// OutsideDefault decides names no rule matches that the agent would
	// forward upstream. Zero: Allow.
	OutsideDefault Action
	// TableDefault decides names no rule matches that the agent answers
	// from its table (cluster names, entries, the table's own NXDOMAIN).
	// Zero: Allow, so cluster DNS keeps working under an allow-list.
	TableDefault Action
	// DenyResponse is the answer to a denied name. Zero: NXDOMAIN.
	DenyResponse Response
	// Mode is Enforce (zero) or Audit.
	Mode Mode
}

// Policy is a compiled Config. It is immutable and safe for concurrent
// use; a nil *Policy allows everything.
type Policy struct {
	exact    map[string]int32 // lowercase name without the trailing dot -> rule index
	wildcard map[string]int32 // lowercase domain of "*.domain" -> rule index
	actions  []Action         // by rule index
	outside  Action
	table    Action
	response Response
	mode     Mode
	rules    int
}

// ErrPattern is wrapped by every error about a rule's pattern.
var ErrPattern = errors.New("invalid pattern")

// ParsePattern checks a pattern and returns its canonical form: lowercase,
// without the trailing dot, and whether it is a wildcard ("*.domain"; the
// returned name is then the domain).
func ParsePattern(p string) (name string, wildcard bool, err error) {
	if err := CheckPatternLength(p); err != nil {
		return "", false, fmt.Errorf("%w %.40q...: %w", ErrPattern, p, err)
	}
	if err := dnsname.Check(p, true); err != nil {
		return "", false, fmt.Errorf("%w %q: %w", ErrPattern, p, err)
	}
	name = strings.ToLower(strings.TrimSuffix(p, "."))
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		return rest, true, nil
	}
	return name, false, nil
}

// New compiles cfg. More than MaxRules rules, or a pattern that fails
// ParsePattern, is an error. Two
// rules with the same pattern (after case and trailing dot) are allowed:
// the first Deny among them decides, else the first of them, so merging
// several policies can never turn a denial into an allowance.
func New(cfg Config) (*Policy, error) {
	if cfg.OutsideDefault > Deny || cfg.TableDefault > Deny || cfg.DenyResponse > Refused || cfg.Mode > Audit {
		return nil, errors.New("policy: default, response or mode out of range")
	}
	if err := CheckRules(len(cfg.Rules)); err != nil {
		return nil, fmt.Errorf("policy: %w", err) // before allocating for them
	}
	p := &Policy{
		exact:    make(map[string]int32),
		wildcard: make(map[string]int32),
		outside:  cfg.OutsideDefault,
		table:    cfg.TableDefault,
		response: cfg.DenyResponse,
		mode:     cfg.Mode,
		rules:    len(cfg.Rules),
		actions:  make([]Action, len(cfg.Rules)),
	}
	var errs []error
	for i, r := range cfg.Rules {
		if r.Action > Deny {
			errs = append(errs, fmt.Errorf("rule %d: action %d out of range", i, r.Action))
			continue
		}
		name, wild, err := ParsePattern(r.Pattern)
		if err != nil {
			errs = append(errs, fmt.Errorf("rule %d: %w", i, err))
			continue
		}
		p.actions[i] = r.Action
		m := p.exact
		if wild {
			m = p.wildcard
		}
		if j, ok := m[name]; ok && !(cfg.Rules[j].Action == Allow && r.Action == Deny) {
			continue
		}
		m[name] = int32(i)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("policy: %w", errors.Join(errs...))
	}
	return p, nil
}

// Mode returns the policy's mode.
func (p *Policy) Mode() Mode {
	if p == nil {
		return Enforce
	}
	return p.mode
}

// Len returns the number of rules the policy was compiled from.
func (p *Policy) Len() int {
	if p == nil {
		return 0
	}
	return p.rules
}
