package policysource

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/meshdns/meshdns/pkg/policy"
)

// A pod is sent the merge of the policies that select it, so the rules of
// one namespace's policies together are bounded as one policy's are: a
// merge of several policies within the CRD's limits must not reach an
// agent beyond them (the agent would refuse it and, with it, every name
// update). Which pods a selector will match is not known in advance, so
// the bound is on the namespace: every pod's merge is within it.
//
// The policies are admitted oldest first (metadata.creationTimestamp, none
// counting as newest, then name, then origin): a policy whose rules would bring its namespace over
// the limit is refused, and the older ones keep their place, so a new
// policy cannot lift those already served. Every replica orders them the
// same way.

// origined is a policy and the index of its origin, for the order.
type origined struct {
	Policy
	origin int
}

// admit returns the policies of one namespace its budget admits, sorted
// by name (then origin), and an error for each refused one, keyed by
// origin, then "namespace/name".
func admit(ps []origined, origins []string, refused map[string]map[string]error) []Policy {
	order := slices.Clone(ps)
	slices.SortFunc(order, func(a, b origined) int {
		return cmp.Or(compareCreated(a.Created, b.Created), cmp.Compare(a.Name, b.Name), cmp.Compare(a.origin, b.origin))
	})
	total := 0
	var older []string // the admitted, for the error
	in := order[:0]
	for _, p := range order {
		if n := len(p.DNS.Rules); policy.CheckRules(total+n) != nil {
			o := origins[p.origin]
			if refused[o] == nil {
				refused[o] = map[string]error{}
			}
			refused[o][p.Namespace+"/"+p.Name] = budgetError(p.Policy, total, older)
			continue
		}
		total += len(p.DNS.Rules)
		older = append(older, p.Namespace+"/"+p.Name)
		in = append(in, p)
	}
	slices.SortFunc(in, func(a, b origined) int { return cmp.Or(cmp.Compare(a.Name, b.Name), cmp.Compare(a.origin, b.origin)) })
	out := make([]Policy, len(in))
	for i, p := range in {
		out[i] = p.Policy
	}
	return out
}

// compareCreated orders creation times, the zero time (a file's policy
// that does not say) after every other: such a policy came from no API
// server, and must not push out one the API server holds.
func compareCreated(a, b time.Time) int {
	switch {
	case a.IsZero() && b.IsZero():
		return 0
	case a.IsZero():
		return 1
	case b.IsZero():
		return -1
	}
	return a.Compare(b)
}

// budgetError says why p is refused: its rules and the older policies'.
func budgetError(p Policy, older int, names []string) error {
	list := strings.Join(names, ", ")
	if len(names) == 0 {
		list = "none"
	} else if len(names) > 3 {
		list = strings.Join(names[:3], ", ") + fmt.Sprintf(" and %d more", len(names)-3)
	}
	return fmt.Errorf("DNSPolicy %s/%s: its %d rules and the %d of the older policies of namespace %s (%s) come to %d, "+
		"more than the limit of %d rules for the policies of a namespace together (a pod is sent their merge); not served",
		p.Namespace, p.Name, len(p.DNS.Rules), older, p.Namespace, list, older+len(p.DNS.Rules), policy.MaxRules)
}
