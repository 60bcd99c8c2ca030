package policy

import (
	"errors"
	"fmt"
)

// The bounds of a policy, the DNSPolicy CRD's (spec.rules maxItems and a
// pattern's maxLength in examples/kubernetes/15-dnspolicy-crd.yaml, where
// a test in controlplane/policysource keeps them equal). The control plane
// applies them to every input (objects, files, the merge of the policies
// of one pod) and the agent to what it is sent, so no input reaches an
// agent the API server would have refused: at the bound a policy costs
// the agent a few MB (docs/policy.md, Cost), within its sidecar's memory.
const (
	// MaxRules is the most rules a policy may have.
	MaxRules = 10000
	// MaxPatternLength is the longest pattern, in characters: a name of
	// 253 with its trailing dot.
	MaxPatternLength = 254
)

// ErrLimit is matched (errors.Is) by every error about a bound above.
var ErrLimit = errors.New("policy over a limit")

// limitError is an error about a bound, its message naming the bound.
type limitError string

func (e limitError) Error() string      { return string(e) }
func (limitError) Is(target error) bool { return target == ErrLimit }

// CheckRules returns an error naming the limit when n rules are more than
// a policy may have.
func CheckRules(n int) error {
	if n > MaxRules {
		return limitError(fmt.Sprintf("policy has %d rules, more than the limit of %d", n, MaxRules))
	}
	return nil
}

// CheckPatternLength returns an error naming the limit when pattern p is
// longer than a pattern may be.
func CheckPatternLength(p string) error {
	if len(p) > MaxPatternLength {
		return limitError(fmt.Sprintf("pattern of %d characters, more than the limit of %d", len(p), MaxPatternLength))
	}
	return nil
}
