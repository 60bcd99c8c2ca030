package kubernetes_test

import (
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/meshdns/meshdns/internal/testkit/kubetest"
	"github.com/meshdns/meshdns/pkg/policy"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

var (
	dnsPolicyGVR = schema.GroupVersionResource{Group: "meshdns.io", Version: "v1alpha1", Resource: "dnspolicies"}
)

func readObject(t *testing.T, path string) *unstructured.Unstructured {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(data, &u.Object); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return u
}

// TestDNSPolicyCRD installs the CRD on a real API server: the example
// object and a minimal one are accepted (with the documented defaults),
// invalid ones are rejected by the schema with a message naming the field,
// and status is a subresource.
func TestDNSPolicyCRD(t *testing.T) {
	c := kubetest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	c.InstallCRD(t, "15-dnspolicy-crd.yaml")
	ns := c.Namespace(t, "policy")
	ri := dyn.Resource(dnsPolicyGVR).Namespace(ns)
	create := func(spec map[string]any) (*unstructured.Unstructured, error) {
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "meshdns.io/v1alpha1", "kind": "DNSPolicy",
			"metadata": map[string]any{"generateName": "p-"},
		}}
		if spec != nil {
			u.Object["spec"] = spec
		}
		return ri.Create(ctx, u, metav1.CreateOptions{FieldValidation: "Strict"})
	}

	t.Run("example accepted", func(t *testing.T) {
		got, err := ri.Create(ctx, readObject(t, "dnspolicy/allow-stripe.yaml"), metav1.CreateOptions{FieldValidation: "Strict"})
		if err != nil {
			t.Fatalf("create example: %v", err)
		}
		rules, _, _ := unstructured.NestedSlice(got.Object, "spec", "rules")
		if len(rules) != 2 {
			t.Errorf("stored %d rules, want 2", len(rules))
		}
	})
	t.Run("defaults", func(t *testing.T) {
		got, err := create(map[string]any{"rules": []any{map[string]any{"pattern": "API.Example.com.", "action": "Deny"}}})
		if err != nil {
			t.Fatalf("create minimal: %v", err)
		}
		for field, want := range map[string]string{"outsideDefault": "Allow", "tableDefault": "Allow", "denyResponse": "NXDOMAIN", "mode": "Enforce"} {
			if v, _, _ := unstructured.NestedString(got.Object, "spec", field); v != want {
				t.Errorf("spec.%s = %q, want default %q", field, v, want)
			}
		}
	})

	rule := func(pattern, action string) map[string]any {
		return map[string]any{"pattern": pattern, "action": action}
	}
	rules := func(r ...map[string]any) []any {
		out := make([]any, len(r))
		for i := range r {
			out[i] = r[i]
		}
		return out
	}
	tests := []struct {
		name string
		spec map[string]any
		want []string // substrings of the API server's message
	}{
		{name: "no spec", spec: nil, want: []string{"spec", "Required value"}},
		{name: "inner wildcard", spec: map[string]any{"rules": rules(rule("a.*.com", "Deny"))}, want: []string{"spec.rules[0].pattern", "should match"}},
		{name: "bare wildcard", spec: map[string]any{"rules": rules(rule("*", "Deny"))}, want: []string{"spec.rules[0].pattern"}},
		{name: "space", spec: map[string]any{"rules": rules(rule("ok.com", "Allow"), rule("a b.com", "Deny"))}, want: []string{"spec.rules[1].pattern"}},
		{name: "empty label", spec: map[string]any{"rules": rules(rule("a..com", "Deny"))}, want: []string{"spec.rules[0].pattern"}},
		{name: "long label", spec: map[string]any{"rules": rules(rule(strings.Repeat("a", 64)+".com", "Deny"))}, want: []string{"spec.rules[0].pattern"}},
		{name: "unknown action", spec: map[string]any{"rules": rules(rule("a.com", "Block"))}, want: []string{"spec.rules[0].action", `Unsupported value: "Block"`}},
		{name: "missing action", spec: map[string]any{"rules": rules(map[string]any{"pattern": "a.com"})}, want: []string{"spec.rules[0].action", "Required value"}},
		{name: "duplicate pattern", spec: map[string]any{"rules": rules(rule("a.com", "Allow"), rule("a.com", "Deny"))}, want: []string{"spec.rules[1]", "Duplicate value"}},
		{name: "unknown mode", spec: map[string]any{"mode": "Loud"}, want: []string{"spec.mode", `Unsupported value: "Loud"`}},
		{name: "unknown response", spec: map[string]any{"denyResponse": "SERVFAIL"}, want: []string{"spec.denyResponse", "Unsupported value"}},
		{name: "unknown default", spec: map[string]any{"outsideDefault": "allow"}, want: []string{"spec.outsideDefault", "Unsupported value"}},
		{name: "unknown selector operator", spec: map[string]any{"podSelector": map[string]any{"matchExpressions": []any{map[string]any{"key": "app", "operator": "Has"}}}},
			want: []string{"spec.podSelector.matchExpressions[0].operator", "Unsupported value"}},
		{name: "unknown field", spec: map[string]any{"rulez": []any{}}, want: []string{`unknown field "spec.rulez"`}},
	}
	for _, tc := range tests {
		t.Run("rejects "+tc.name, func(t *testing.T) {
			_, err := create(tc.spec)
			if err == nil {
				t.Fatal("accepted")
			}
			if !apierrors.IsInvalid(err) && !apierrors.IsBadRequest(err) {
				t.Errorf("error is not Invalid or BadRequest: %v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("message %q lacks %q", err, w)
				}
			}
		})
	}

	t.Run("status subresource", func(t *testing.T) {
		p, err := create(map[string]any{"mode": "Audit"})
		if err != nil {
			t.Fatal(err)
		}
		cond := map[string]any{"type": "Accepted", "status": "False", "reason": "DuplicatePattern",
			"message": "rules 0 and 1: pattern a.com twice", "lastTransitionTime": "2026-01-02T03:04:05Z"}
		if err := unstructured.SetNestedSlice(p.Object, []any{cond}, "status", "conditions"); err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(p.Object, "Enforce", "spec", "mode") // ignored by /status
		got, err := ri.UpdateStatus(ctx, p, metav1.UpdateOptions{})
		if err != nil {
			t.Fatalf("update status: %v", err)
		}
		if conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions"); len(conds) != 1 {
			t.Errorf("status conditions = %v", conds)
		}
		if mode, _, _ := unstructured.NestedString(got.Object, "spec", "mode"); mode != "Audit" {
			t.Errorf("status update changed spec.mode to %q", mode)
		}
		bad := got.DeepCopy()
		_ = unstructured.SetNestedSlice(bad.Object, []any{map[string]any{"type": "Accepted", "status": "Maybe"}}, "status", "conditions")
		if _, err := ri.UpdateStatus(ctx, bad, metav1.UpdateOptions{}); err == nil || !strings.Contains(err.Error(), "status.conditions[0].status") {
			t.Errorf("a condition with status Maybe: %v", err)
		}
	})
}

// TestDNSPolicyPatternSchema: the CRD's pattern regular expression accepts
// what pkg/policy accepts, so the schema never rejects a valid pattern and
// lets through only what the control plane then reports (names over 253
// characters, which the schema bounds only roughly).
func TestDNSPolicyPatternSchema(t *testing.T) {
	crd := readObject(t, "15-dnspolicy-crd.yaml")
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	expr, _, _ := unstructured.NestedString(versions[0].(map[string]any), "schema", "openAPIV3Schema", "properties", "spec",
		"properties", "rules", "items", "properties", "pattern", "pattern")
	re, err := regexp.Compile(expr)
	if err != nil || expr == "" {
		t.Fatalf("pattern %q: %v", expr, err)
	}
	for _, p := range []string{
		"api.stripe.com", "API.Stripe.COM.", "*.s3.amazonaws.com", "*.a.", "_srv._tcp.x", "a", "a-b.c_d", "x1.y2",
		"", ".", "*", "*.", "a.*.com", "**.a", "a..b", "-a.b", "a-.b", "a b", `a\.b`, "ü.de", "a.b..", "*a.b",
		strings.Repeat("a", 63) + ".com", strings.Repeat("a", 64) + ".com",
	} {
		_, _, perr := policy.ParsePattern(p)
		if got, want := re.MatchString(p), perr == nil; got != want {
			t.Errorf("pattern %q: schema accepts %v, pkg/policy accepts %v (%v)", p, got, want, perr)
		}
	}
}
