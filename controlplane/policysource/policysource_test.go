package policysource

import (
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/internal/namewire"
)

const header = "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: p, namespace: shop}\n"

func TestParseFileExample(t *testing.T) {
	data, err := os.ReadFile("../../examples/kubernetes/dnspolicy/allow-stripe.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ps, err := ParseFile(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 {
		t.Fatalf("%d policies, want 1", len(ps))
	}
	p := ps[0]
	want := namewire.DNSPolicy{
		Rules: []namewire.PolicyRule{
			{Pattern: "api.stripe.com.", Action: namewire.PolicyActionAllow, Source: "default/allow-stripe"},
			{Pattern: "*.s3.amazonaws.com.", Action: namewire.PolicyActionAllow, Source: "default/allow-stripe"},
		},
		OutsideDefault: namewire.PolicyActionDeny,
		TableDefault:   namewire.PolicyActionAllow,
		DenyResponse:   namewire.DenyResponseNXDOMAIN,
		Mode:           namewire.PolicyModeEnforce,
		Source:         "default/allow-stripe",
	}
	if diff := cmp.Diff(want, p.DNS); diff != "" {
		t.Errorf("DNS (-want +got):\n%s", diff)
	}
	if !p.Selector.Matches(labels.Set{"app": "checkout"}) || p.Selector.Matches(labels.Set{"app": "web"}) {
		t.Errorf("selector %q", p.Selector)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name  string
		doc   string   // appended to header unless it starts with "apiVersion"
		want  []string // substrings of the error; nil: valid
		check func(t *testing.T, p Policy)
	}{
		{name: "minimal: defaults", doc: "spec: {}", check: func(t *testing.T, p Policy) {
			want := namewire.DNSPolicy{OutsideDefault: namewire.PolicyActionAllow, TableDefault: namewire.PolicyActionAllow,
				DenyResponse: namewire.DenyResponseNXDOMAIN, Mode: namewire.PolicyModeEnforce, Source: "shop/p"}
			if diff := cmp.Diff(want, p.DNS); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			if !p.Selector.Empty() {
				t.Errorf("selector %q, want everything", p.Selector)
			}
		}},
		{name: "canonical patterns", doc: "spec:\n  rules:\n  - {pattern: API.Example.COM, action: Deny}\n  - {pattern: '*.B.example.', action: Allow}\n  mode: Audit\n  denyResponse: REFUSED",
			check: func(t *testing.T, p Policy) {
				if got := []string{p.DNS.Rules[0].Pattern, p.DNS.Rules[1].Pattern}; !cmp.Equal(got, []string{"api.example.com.", "*.b.example."}) {
					t.Errorf("patterns %q", got)
				}
				if p.DNS.Mode != namewire.PolicyModeAudit || p.DNS.DenyResponse != namewire.DenyResponseRefused {
					t.Errorf("mode %v response %v", p.DNS.Mode, p.DNS.DenyResponse)
				}
			}},
		{name: "selector expressions", doc: "spec:\n  podSelector:\n    matchExpressions:\n    - {key: tier, operator: In, values: [api, web]}",
			check: func(t *testing.T, p Policy) {
				if !p.Selector.Matches(labels.Set{"tier": "api"}) || p.Selector.Matches(labels.Set{"tier": "db"}) {
					t.Errorf("selector %q", p.Selector)
				}
			}},
		{name: "no namespace is default", doc: "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: x}\nspec: {}",
			check: func(t *testing.T, p Policy) {
				if p.Namespace != "default" || p.DNS.Source != "default/x" {
					t.Errorf("namespace %q source %q", p.Namespace, p.DNS.Source)
				}
			}},
		{name: "duplicate in another case", doc: "spec:\n  rules:\n  - {pattern: a.com, action: Deny}\n  - {pattern: A.COM., action: Deny}",
			want: []string{"DNSPolicy shop/p", `spec.rules[1]: pattern "A.COM." (a.com. Deny) is a duplicate of spec.rules[0] ("a.com" Deny)`}},
		{name: "conflict", doc: "spec:\n  rules:\n  - {pattern: '*.a.com', action: Deny}\n  - {pattern: '*.A.com', action: Allow}",
			want: []string{"spec.rules[1]", "in conflict with spec.rules[0]"}},
		{name: "bad pattern", doc: "spec:\n  rules:\n  - {pattern: ok.com, action: Allow}\n  - {pattern: a.*.com, action: Deny}",
			want: []string{`spec.rules[1].pattern: invalid pattern "a.*.com"`}},
		{name: "name too long", doc: "spec:\n  rules:\n  - {pattern: " + strings.Repeat("abcdefghi.", 26) + "com, action: Allow}",
			want: []string{"spec.rules[0].pattern", "pattern of 263 characters, more than the limit of 254"}},
		{name: "bad action", doc: "spec:\n  rules:\n  - {pattern: a.com, action: Block}", want: []string{`spec.rules[0].action: "Block" is not Allow or Deny`}},
		{name: "missing action", doc: "spec:\n  rules:\n  - {pattern: a.com}", want: []string{"spec.rules[0].action: required"}},
		{name: "bad enums", doc: "spec: {outsideDefault: allow, tableDefault: Maybe, denyResponse: SERVFAIL, mode: Loud}",
			want: []string{"spec.outsideDefault", "spec.tableDefault", `spec.denyResponse: "SERVFAIL"`, `spec.mode: "Loud"`}},
		{name: "bad selector", doc: "spec:\n  podSelector:\n    matchExpressions:\n    - {key: tier, operator: Has}", want: []string{"spec.podSelector", "Has"}},
		{name: "unknown field", doc: "spec: {rulez: []}", want: []string{`unknown field "rulez"`}},
		{name: "no spec", doc: "", want: []string{"spec: required"}},
		{name: "wrong kind", doc: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}", want: []string{`apiVersion/kind "v1"/"ConfigMap"`}},
		{name: "no name", doc: "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nspec: {}", want: []string{"metadata.name: required"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			doc := tc.doc
			if !strings.HasPrefix(doc, "apiVersion") {
				doc = header + doc
			}
			ps, err := ParseFile([]byte(doc))
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				tc.check(t, ps[0])
				return
			}
			if err == nil {
				t.Fatalf("accepted: %+v", ps)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestParseFileDocuments(t *testing.T) {
	good := header + "spec: {}\n"
	bad := strings.Replace(header, "name: p", "name: q", 1) + "spec: {mode: Loud}\n"
	ps, err := ParseFile([]byte(good + "---\n" + bad + "---\n"))
	if len(ps) != 1 || ps[0].Name != "p" {
		t.Errorf("valid policies %v, want p", ps)
	}
	if err == nil || !strings.Contains(err.Error(), "document 1: DNSPolicy shop/q: spec.mode") {
		t.Errorf("error %v, want document 1's", err)
	}
	if _, err := ParseFile([]byte("# nothing\n")); err == nil || !strings.Contains(err.Error(), "no DNSPolicy") {
		t.Errorf("empty file: %v", err)
	}
	if _, err := ParseFile([]byte(header + "spec: [\n")); err == nil || !strings.Contains(err.Error(), "document 0") {
		t.Errorf("syntax error: %v", err)
	}
}

func TestFromUnstructured(t *testing.T) {
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(header+"spec: {rules: [{pattern: x.org, action: Deny}]}\nstatus: {conditions: []}"), &u.Object); err != nil {
		t.Fatal(err)
	}
	u.SetGeneration(3)
	p, err := FromUnstructured(u)
	if err != nil {
		t.Fatal(err)
	}
	if p.Generation != 3 || p.Namespace != "shop" || len(p.DNS.Rules) != 1 {
		t.Errorf("%+v", p)
	}
	if s := p.String(); !strings.Contains(s, "DNSPolicy shop/p: 1 rules") {
		t.Errorf("String() = %q", s)
	}
}
