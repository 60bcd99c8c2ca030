package policysource

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/meshdns/meshdns/internal/namewire"
	"github.com/meshdns/meshdns/pkg/policy"
)

func mustParse(t *testing.T, doc string) Policy {
	t.Helper()
	ps, err := ParseFile([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return ps[0]
}

func TestMerge(t *testing.T) {
	allowAudit := mustParse(t, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: b, namespace: shop}\n"+
		"spec: {podSelector: {matchLabels: {app: checkout}}, rules: [{pattern: a.example, action: Allow}], mode: Audit, denyResponse: REFUSED}")
	denyEnforce := mustParse(t, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: a, namespace: shop}\n"+
		"spec: {rules: [{pattern: a.example, action: Deny}], outsideDefault: Deny}")
	other := mustParse(t, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: c, namespace: web}\nspec: {}")

	if got := Merge(nil); got != nil {
		t.Errorf("Merge(nil) = %+v", got)
	}
	want := &namewire.DNSPolicy{
		Rules: []namewire.PolicyRule{
			{Pattern: "a.example.", Action: namewire.PolicyActionDeny, Source: "shop/a"},
			{Pattern: "a.example.", Action: namewire.PolicyActionAllow, Source: "shop/b"},
		},
		OutsideDefault: namewire.PolicyActionDeny,
		TableDefault:   namewire.PolicyActionAllow,
		DenyResponse:   namewire.DenyResponseNXDOMAIN,
		Mode:           namewire.PolicyModeEnforce,
		Source:         "shop/a,shop/b",
	}
	for _, order := range [][]Policy{{allowAudit, denyEnforce}, {denyEnforce, allowAudit}} {
		if diff := cmp.Diff(want, Merge(order)); diff != "" {
			t.Errorf("Merge (-want +got):\n%s", diff)
		}
	}
	// The merged policy compiles, and the conflict denies.
	p, err := policy.New(compile(Merge([]Policy{allowAudit, denyEnforce})))
	if err != nil {
		t.Fatal(err)
	}
	if d := p.Decide("a.example.", false); !d.Blocks() || d.Rule != 0 {
		t.Errorf("merged conflict: %+v", d)
	}
	alone := Merge([]Policy{allowAudit})
	if alone.Mode != namewire.PolicyModeAudit || alone.DenyResponse != namewire.DenyResponseRefused {
		t.Errorf("one policy keeps its mode and response: %+v", alone)
	}

	all := []Policy{allowAudit, denyEnforce, other}
	names := func(ps []Policy) (out []string) {
		for _, p := range ps {
			out = append(out, p.Name)
		}
		return out
	}
	if got := names(Selecting(all, "shop", labels.Set{"app": "checkout"})); !cmp.Equal(got, []string{"b", "a"}) {
		t.Errorf("checkout pod: %q", got)
	}
	if got := names(Selecting(all, "shop", labels.Set{"app": "web"})); !cmp.Equal(got, []string{"a"}) {
		t.Errorf("web pod: %q", got)
	}
	if got := names(Selecting(all, "other", nil)); got != nil {
		t.Errorf("other namespace: %q", got)
	}
}

func TestCondition(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	c := Condition(4, nil, now)
	if c.Status != metav1.ConditionTrue || c.ObservedGeneration != 4 || c.Type != "Accepted" || !c.LastTransitionTime.Time.Equal(now) {
		t.Errorf("valid: %+v", c)
	}
	c = Condition(5, errors.New(strings.Repeat("x", 40000)), now)
	if c.Status != metav1.ConditionFalse || c.Reason != "Invalid" || len(c.Message) != 32768 {
		t.Errorf("invalid: status %s reason %s message length %d", c.Status, c.Reason, len(c.Message))
	}
}
