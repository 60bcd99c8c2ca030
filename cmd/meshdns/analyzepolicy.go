package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/meshdns/meshdns/controlplane/policysource"
)

// policyConditionTypes are the status condition types in which the control
// plane reports whether it took a DNSPolicy: policysource's, and "Valid",
// the type its first version wrote.
var policyConditionTypes = []string{policysource.ConditionAccepted, "Valid"}

// dnsPolicy is the part of a DNSPolicy object analyze reads: its name and
// its status conditions, not its spec (the control plane judged that).
type dnsPolicy struct {
	metav1.ObjectMeta `json:"metadata"`
	Status            struct {
		Conditions []metav1.Condition `json:"conditions,omitempty"`
	} `json:"status"`
}

// readPolicies lists the DNSPolicy objects of every namespace; none when
// the CRD is not installed (an install without policies) or analyze may
// not list them.
func readPolicies(ctx context.Context, k *kubeREST) ([]dnsPolicy, error) {
	var out []dnsPolicy
	cont := ""
	for {
		req := k.core.Get().AbsPath("/apis/meshdns.io/v1alpha1/dnspolicies").Param("limit", "500")
		if cont != "" {
			req = req.Param("continue", cont)
		}
		body, err := req.DoRaw(ctx)
		switch {
		case apierrors.IsNotFound(err) || apierrors.IsForbidden(err):
			return nil, nil
		case err != nil:
			return nil, fmt.Errorf("list DNSPolicy objects: %w", err)
		}
		var list struct {
			Metadata metav1.ListMeta `json:"metadata"`
			Items    []dnsPolicy     `json:"items"`
		}
		if err := json.Unmarshal(body, &list); err != nil {
			return nil, fmt.Errorf("list DNSPolicy objects: %w", err)
		}
		out = append(out, list.Items...)
		if cont = list.Metadata.Continue; cont == "" {
			return out, nil
		}
	}
}

// checkPolicies: DNSPolicy objects whose current generation the control
// plane refused. A condition about an older generation is skipped: the
// object changed since, and the control plane has not judged the change.
func checkPolicies(c *cluster) []finding {
	var out []finding
	for _, p := range c.policies {
		cond := policyCondition(p)
		if cond == nil || cond.Status != metav1.ConditionFalse {
			continue
		}
		if cond.ObservedGeneration != 0 && cond.ObservedGeneration != p.Generation {
			continue
		}
		msg := fmt.Sprintf("the control plane refused this policy (%s=False, reason %s): %s", cond.Type, orDash(cond.Reason), orDash(cond.Message))
		out = append(out, finding{codePolicyRejected, severityError, "DNSPolicy " + p.Namespace + "/" + p.Name, msg,
			"correct the spec as the message says and check it offline with meshdns validate --policy FILE before applying; " +
				"see the condition with kubectl -n " + p.Namespace + " get dnspolicy " + p.Name + " -o yaml (generation " + strconv.FormatInt(p.Generation, 10) + ")"})
	}
	return out
}

// policyCondition returns the first of policyConditionTypes present, or nil.
func policyCondition(p dnsPolicy) *metav1.Condition {
	for _, t := range policyConditionTypes {
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == t {
				return &p.Status.Conditions[i]
			}
		}
	}
	return nil
}
