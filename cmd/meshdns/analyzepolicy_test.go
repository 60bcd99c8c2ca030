package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/meshdns/meshdns/controlplane/policysource"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

var dnsPolicyResource = schema.GroupVersionResource{Group: "meshdns.io", Version: "v1alpha1", Resource: "dnspolicies"}

// brokenPolicies installs the shipped DNSPolicy CRD and, in namespace ns,
// three policies whose status the test writes as the control plane does
// (policysource.Condition):
// "refused" (Accepted=False for its generation), "accepted" (True) and
// "changed" (False for generation 1, but edited since, so not judged).
// It returns the name of the refused one.
func brokenPolicies(ctx context.Context, t *testing.T, c *kubetest.Cluster, ns string) string {
	t.Helper()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	c.InstallCRD(t, "../../examples/kubernetes/15-dnspolicy-crd.yaml")
	policies := dyn.Resource(dnsPolicyResource).Namespace(ns)
	write := func(name string, status metav1.ConditionStatus, observed int64, edit bool) {
		t.Helper()
		p := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "meshdns.io/v1alpha1", "kind": "DNSPolicy",
			"metadata": map[string]any{"name": name},
			"spec":     map[string]any{"rules": []any{map[string]any{"pattern": "api.example.com", "action": "Allow"}}},
		}}
		p, err := policies.Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create DNSPolicy %s: %v", name, err)
		}
		if edit {
			_ = unstructured.SetNestedSlice(p.Object, []any{map[string]any{"pattern": "api.example.org", "action": "Allow"}}, "spec", "rules")
			if p, err = policies.Update(ctx, p, metav1.UpdateOptions{}); err != nil {
				t.Fatalf("update DNSPolicy %s: %v", name, err)
			}
		}
		// The condition as the control plane writes it.
		var verdict error
		if status == metav1.ConditionFalse {
			verdict = errors.New(`DNSPolicy ` + ns + `/` + name + `: spec.rules[1]: pattern "A.COM." (a.com. Deny) conflicts with spec.rules[0] ("a.com" Allow)`)
		}
		given := policysource.Condition(observed, verdict, time.Now())
		cond, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&given)
		if err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedSlice(p.Object, []any{cond}, "status", "conditions"); err != nil {
			t.Fatal(err)
		}
		if _, err := policies.UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatalf("write status of DNSPolicy %s: %v", name, err)
		}
	}
	write("refused", metav1.ConditionFalse, 1, false)
	write("accepted", metav1.ConditionTrue, 1, false)
	write("changed", metav1.ConditionFalse, 1, true)
	return "refused"
}

// TestCheckPolicies: which conditions make a finding, on hand-made objects.
func TestCheckPolicies(t *testing.T) {
	policy := func(name string, gen int64, conds ...metav1.Condition) dnsPolicy {
		p := dnsPolicy{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "shop", Generation: gen}}
		p.Status.Conditions = conds
		return p
	}
	cond := func(typ string, status metav1.ConditionStatus, gen int64) metav1.Condition {
		return metav1.Condition{Type: typ, Status: status, ObservedGeneration: gen, Reason: "Invalid", Message: "bad pattern"}
	}
	c := &cluster{policies: []dnsPolicy{
		policy("no-status", 1),
		policy("accepted", 2, cond("Accepted", metav1.ConditionTrue, 2)),
		policy("refused", 2, cond("Accepted", metav1.ConditionFalse, 2)),
		policy("refused-older-type", 1, cond("Valid", metav1.ConditionFalse, 1)),
		policy("refused-no-generation", 3, cond("Accepted", metav1.ConditionFalse, 0)),
		policy("edited-since", 3, cond("Accepted", metav1.ConditionFalse, 2)),
		policy("unknown", 1, cond("Accepted", metav1.ConditionUnknown, 1)),
		policy("accepted-wins", 1, cond("Valid", metav1.ConditionFalse, 1), cond("Accepted", metav1.ConditionTrue, 1)),
	}}
	var got []string
	for _, f := range checkPolicies(c) {
		got = append(got, f.Object)
		if f.Code != codePolicyRejected || f.Severity != severityError || f.Fix == "" {
			t.Errorf("finding %+v: want code %s, an Error and a fix", f, codePolicyRejected)
		}
	}
	want := []string{"DNSPolicy shop/refused", "DNSPolicy shop/refused-older-type", "DNSPolicy shop/refused-no-generation"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("findings (-want +got):\n%s", diff)
	}
}
