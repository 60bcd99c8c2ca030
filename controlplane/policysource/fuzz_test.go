package policysource

import (
	"strings"
	"testing"

	"github.com/meshdns/meshdns/pkg/policy"
)

// FuzzParseFile: any input is an error or valid policies whose rules are
// canonical, unique and compile.
func FuzzParseFile(f *testing.F) {
	f.Add([]byte(header + "spec: {rules: [{pattern: a.com, action: Allow}], outsideDefault: Deny}"))            // valid
	f.Add([]byte(header + "spec: {rules: [{pattern: a.com, action: Allow}, {pattern: A.com., action: Deny}]}")) // conflict
	f.Add([]byte(header + "spec: {podSelector: {matchLabels: {app: x}}}"))                                      // selector
	f.Add([]byte(`{"apiVersion":"meshdns.io/v1alpha1","kind":"DNSPolicy","metadata":{"name":"j"},"spec":{}}`))  // JSON
	f.Add([]byte("---\n---\n"))                                                                                 // no documents
	f.Fuzz(func(t *testing.T, data []byte) {
		ps, _ := ParseFile(data)
		for _, p := range ps {
			seen := map[string]bool{}
			for _, r := range p.DNS.Rules {
				if r.Pattern != strings.ToLower(r.Pattern) || !strings.HasSuffix(r.Pattern, ".") || seen[r.Pattern] {
					t.Fatalf("rule pattern %q not canonical or repeated", r.Pattern)
				}
				seen[r.Pattern] = true
			}
			if _, err := policy.New(compile(&p.DNS)); err != nil {
				t.Fatalf("valid policy does not compile: %v", err)
			}
			if p.Selector == nil || p.Name == "" {
				t.Fatalf("policy without selector or name: %+v", p)
			}
		}
	})
}
