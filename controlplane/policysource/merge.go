package policysource

import (
	"cmp"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/meshdns/meshdns/internal/namewire"
)

// Merge combines the policies that select one pod into the one policy its
// agent is sent, the same whatever order they come in (every replica must
// compute the same table version):
//
//   - the rules of all, ordered by object (namespace/name), each keeping
//     its Source; the same pattern with both actions denies (pkg/policy);
//   - each default Deny if any policy's is, the response REFUSED only if
//     every policy's is, the mode Audit only if every policy audits: when
//     policies disagree the stricter one holds, so adding a policy never
//     loosens what another enforces;
//   - Source lists the objects, "ns/a,ns/b".
//
// Merge of no policies is nil: the pod is not governed.
func Merge(ps []Policy) *namewire.DNSPolicy {
	if len(ps) == 0 {
		return nil
	}
	ps = slices.Clone(ps)
	slices.SortFunc(ps, func(a, b Policy) int {
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	out := &namewire.DNSPolicy{
		OutsideDefault: namewire.PolicyActionAllow,
		TableDefault:   namewire.PolicyActionAllow,
		DenyResponse:   namewire.DenyResponseRefused,
		Mode:           namewire.PolicyModeAudit,
	}
	sources := make([]string, 0, len(ps))
	for _, p := range ps {
		d := p.DNS
		out.Rules = append(out.Rules, d.Rules...)
		if d.OutsideDefault == namewire.PolicyActionDeny {
			out.OutsideDefault = namewire.PolicyActionDeny
		}
		if d.TableDefault == namewire.PolicyActionDeny {
			out.TableDefault = namewire.PolicyActionDeny
		}
		if d.DenyResponse != namewire.DenyResponseRefused {
			out.DenyResponse = namewire.DenyResponseNXDOMAIN
		}
		if d.Mode != namewire.PolicyModeAudit {
			out.Mode = namewire.PolicyModeEnforce
		}
		sources = append(sources, d.Source)
	}
	out.Source = strings.Join(sources, ",")
	return out
}

// Selecting returns the policies of ps that select a pod of namespace ns
// with labels podLabels.
func Selecting(ps []Policy, ns string, podLabels labels.Set) []Policy {
	var out []Policy
	for _, p := range ps {
		if p.Namespace == ns && p.Selector.Matches(podLabels) {
			out = append(out, p)
		}
	}
	return out
}

// ConditionAccepted is the status condition type the control plane writes
// on a DNSPolicy: True when the object is valid and served to the agents it
// selects, False (reason Invalid) with the error otherwise. `meshdns
// analyze` reads it.
const ConditionAccepted = "Accepted"

// Condition returns the Accepted condition for an object of generation gen
// whose validation returned err, for status.conditions.
func Condition(gen int64, err error, now time.Time) metav1.Condition {
	c := metav1.Condition{Type: ConditionAccepted, Status: metav1.ConditionTrue, ObservedGeneration: gen,
		LastTransitionTime: metav1.NewTime(now), Reason: "Accepted", Message: "the control plane accepted the policy"}
	if err != nil {
		c.Status, c.Reason, c.Message = metav1.ConditionFalse, "Invalid", cutMessage(err.Error())
	}
	return c
}

// maxConditionMessage is the CRD's maxLength of a condition's message.
const maxConditionMessage = 32768

// cutMessage cuts a condition's message to the CRD's maxLength.
func cutMessage(m string) string {
	if len(m) > maxConditionMessage {
		return m[:maxConditionMessage-3] + "..."
	}
	return m
}
