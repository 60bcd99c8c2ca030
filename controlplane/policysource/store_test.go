package policysource

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/meshdns/meshdns/controlplane/auth"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// fired reports whether ch is closed.
func fired(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// sources returns the policy's Source ("" for none) and whether the
// settings require the policy feature when they carry one.
func fill(s *Store, ns, pod string) (string, []string) {
	var st meshdnsv1.AgentSettings
	s.Fill(auth.Identity{Namespace: ns, Pod: pod}, &st)
	return st.GetPolicy().GetSource(), st.Requires
}

func TestStore(t *testing.T) {
	whole := mustParse(t, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: whole, namespace: shop}\n"+
		"spec: {rules: [{pattern: a.example, action: Deny}]}")
	checkout := mustParse(t, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: checkout, namespace: shop}\n"+
		"spec: {podSelector: {matchLabels: {app: checkout}}, rules: [{pattern: b.example, action: Allow}], outsideDefault: Deny}")
	web := mustParse(t, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: w, namespace: web}\nspec: {}")

	s := NewStore()
	if src, req := fill(s, "shop", "p"); src != "" || req != nil {
		t.Fatalf("empty store: %q %v", src, req)
	}
	ch := s.Changed()
	ns, need := s.LabelNamespaces()
	s.SetPolicies(Origin, []Policy{checkout, whole})
	s.SetPolicies(FileOrigin, []Policy{web})
	if !fired(ch) || !fired(need) {
		t.Fatal("SetPolicies fired neither Changed nor LabelNamespaces")
	}
	if ns, _ = s.LabelNamespaces(); !cmp.Equal(ns, []string{"shop"}) {
		t.Errorf("LabelNamespaces = %v, want [shop]", ns)
	}

	// Labels not known yet: the pod is judged with none.
	if src, req := fill(s, "shop", "p"); src != "shop/whole" || !cmp.Equal(req, []string{Feature}) {
		t.Errorf("unknown pod: %q %v", src, req)
	}
	if src, _ := fill(s, "web", "x"); src != "web/w" {
		t.Errorf("file policy: %q", src)
	}
	if src, req := fill(s, "other", "x"); src != "" || req != nil {
		t.Errorf("ungoverned namespace: %q %v", src, req)
	}

	ch = s.Changed()
	s.SetPod("shop", "p", labels.Set{"app": "web"})
	if fired(ch) {
		t.Error("a label change that selects no other policy fired Changed")
	}
	s.SetPod("shop", "p", labels.Set{"app": "checkout"})
	if !fired(ch) {
		t.Error("relabelling into a selector did not fire Changed")
	}
	var st meshdnsv1.AgentSettings
	st.Requires = []string{"pod-zone", Feature}
	s.Fill(auth.Identity{Namespace: "shop", Pod: "p"}, &st)
	if st.Policy.GetSource() != "shop/checkout,shop/whole" || len(st.Policy.Rules) != 2 ||
		st.Policy.OutsideDefault != meshdnsv1.PolicyAction_POLICY_ACTION_DENY || !cmp.Equal(st.Requires, []string{"pod-zone", Feature}) {
		t.Errorf("selected pod: %v, requires %v", st.Policy, st.Requires)
	}
	// A SPIFFE identity's pod name is only claimed: no labels.
	var spiffe meshdnsv1.AgentSettings
	s.Fill(auth.Identity{Method: auth.MethodSPIFFE, Namespace: "shop", Pod: "p"}, &spiffe)
	if got := spiffe.GetPolicy().GetSource(); got != "shop/whole" {
		t.Errorf("SPIFFE identity claiming a labelled pod: %q, want shop/whole", got)
	}
	var again meshdnsv1.AgentSettings
	s.Fill(auth.Identity{Namespace: "shop", Pod: "p"}, &again)
	if again.Policy != st.Policy {
		t.Error("the merged policy of one selection is built again")
	}

	// A change in another namespace keeps this one's shared message.
	s.SetPolicies(FileOrigin, nil)
	var kept meshdnsv1.AgentSettings
	s.Fill(auth.Identity{Namespace: "shop", Pod: "p"}, &kept)
	if kept.Policy != st.Policy {
		t.Error("a change in another namespace rebuilt this namespace's merged policy")
	}

	ch = s.Changed()
	s.SetPod("shop", "p", nil)
	if !fired(ch) {
		t.Error("deleting a selected pod did not fire Changed")
	}
	ch = s.Changed()
	s.SetPod("web", "x", labels.Set{"app": "checkout"})
	if fired(ch) {
		t.Error("labels of a namespace without policies fired Changed")
	}

	// A resync with equal objects wakes nobody; dropping the selector
	// policy stops the label watch of its namespace.
	ch = s.Changed()
	s.SetPolicies(Origin, []Policy{mustParse(t, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: checkout, namespace: shop}\n"+
		"spec: {podSelector: {matchLabels: {app: checkout}}, rules: [{pattern: b.example, action: Allow}], outsideDefault: Deny}"), whole})
	if fired(ch) {
		t.Error("equal policies fired Changed")
	}
	_, need = s.LabelNamespaces()
	s.SetPolicies(Origin, []Policy{whole})
	if !fired(ch) || !fired(need) {
		t.Error("removing a policy fired neither Changed nor LabelNamespaces")
	}
	if ns, _ = s.LabelNamespaces(); len(ns) != 0 {
		t.Errorf("LabelNamespaces = %v, want none", ns)
	}
}

// fillSettings returns the policy Fill gives a pod, or nil.
func fillSettings(s *Store, ns, pod string) *meshdnsv1.DNSPolicy {
	var st meshdnsv1.AgentSettings
	s.Fill(auth.Identity{Namespace: ns, Pod: pod}, &st)
	return st.Policy
}
