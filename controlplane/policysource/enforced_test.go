package policysource

import "testing"

func TestStoreEnforced(t *testing.T) {
	audit := mustParse(t, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: audit, namespace: shop}\n"+
		"spec: {mode: Audit, rules: [{pattern: a.example, action: Deny}]}")
	checkout := mustParse(t, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: checkout, namespace: shop}\n"+
		"spec: {podSelector: {matchLabels: {app: checkout}}, rules: [{pattern: b.example, action: Allow}], outsideDefault: Deny}")
	whole := mustParse(t, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: whole, namespace: bank}\nspec: {}")
	s := NewStore()
	s.SetPolicies(Origin, []Policy{audit, checkout, whole})
	tests := []struct {
		name       string
		namespace  string
		labels     map[string]string
		want, inNS bool
	}{
		{name: "selected by an enforcing policy", namespace: "shop", labels: map[string]string{"app": "checkout"}, want: true, inNS: true},
		{name: "selected by an auditing policy only", namespace: "shop", labels: map[string]string{"app": "web"}, inNS: true},
		{name: "namespace-wide enforcing policy", namespace: "bank", want: true, inNS: true},
		{name: "no policy", namespace: "other", labels: map[string]string{"app": "checkout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := s.Enforced(tt.namespace, tt.labels); got != tt.want {
				t.Errorf("Enforced = %v, want %v", got, tt.want)
			}
			if got := s.EnforcedIn(tt.namespace); got != tt.inNS {
				t.Errorf("EnforcedIn = %v, want %v", got, tt.inNS)
			}
		})
	}
}
