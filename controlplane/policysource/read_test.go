package policysource

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/pkg/policy"
)

// policyYAML writes a DNSPolicy of n rules, each pattern of about
// patternLen characters, as block YAML (what a person or a generator
// writes).
func policyYAML(name string, n, patternLen int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: %s, namespace: shop}\nspec:\n  outsideDefault: Deny\n  rules:\n", name)
	pad := ""
	if patternLen > 20 {
		// Labels of 60 characters and dots, up to the length asked.
		pad = strings.Repeat(strings.Repeat("p", 60)+".", patternLen/61)
	}
	for i := range n {
		fmt.Fprintf(&b, "  - pattern: h%d.%sexample.com\n    action: Allow\n", i, pad)
	}
	return b.String()
}

// flowYAML writes a DNSPolicy of n short rules in flow style: the most
// rules a file of MaxFileSize holds.
func flowYAML(n int) string {
	var b strings.Builder
	b.WriteString("apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: p, namespace: shop}\nspec:\n  rules:\n")
	for i := range n {
		fmt.Fprintf(&b, "  - {pattern: h%d.io, action: Allow}\n", i)
	}
	return b.String()
}

// A policy file is refused over the CRD's limits, with an error naming the
// limit, and accepted at them.
func TestReadFileLimits(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		data    string
		wantErr string // "": valid
	}{
		{name: "rules at the limit, longest patterns", data: policyYAML("p", policy.MaxRules, 230)},
		{name: "rules over the limit", data: policyYAML("p", policy.MaxRules+1, 0),
			wantErr: "document 0: DNSPolicy: spec.rules (counted before decoding): policy has 10001 rules, more than the limit of 10000"},
		{name: "100,000 rules: refused by size, unread", data: policyYAML("p", 100_000, 0),
			wantErr: fmt.Sprintf("more than the limit of %d bytes", MaxFileSize)},
		{name: "90,000 short rules within the size", data: flowYAML(90_000),
			wantErr: "document 0: DNSPolicy: spec.rules (counted before decoding): policy has 90000 rules, more than the limit of 10000"},
		{name: "300,000 rules: refused by size, unread", data: policyYAML("p", 300_000, 0),
			wantErr: fmt.Sprintf("more than the limit of %d bytes", MaxFileSize)},
		{name: "JSON over the limit", data: `{"apiVersion": "meshdns.io/v1alpha1", "kind": "DNSPolicy", "metadata": {"name": "p", "namespace": "shop"}, "spec": {"rules": [` +
			strings.TrimSuffix(strings.Repeat(`{"pattern": "a.com", "action": "Allow"},`, policy.MaxRules+1), ",") + `]}}`,
			wantErr: "document 0: DNSPolicy shop/p: spec.rules: policy has 10001 rules, more than the limit of 10000"},
		{name: "pattern over the limit", data: policyYAML("p", 1, 300),
			wantErr: "spec.rules[0].pattern: invalid pattern \"h0.ppp"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".yaml")
			if err := os.WriteFile(path, []byte(tc.data), 0o644); err != nil {
				t.Fatal(err)
			}
			data, err := ReadFile(path)
			var ps []Policy
			if err == nil {
				ps, err = ParseFile(data)
			}
			if tc.wantErr == "" {
				if err != nil || len(ps) != 1 || len(ps[0].DNS.Rules) != policy.MaxRules {
					t.Fatalf("%d bytes: %v, %d policies", len(tc.data), err, len(ps))
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one with %q", err, tc.wantErr)
			}
			if len(err.Error()) > 512 {
				t.Errorf("error of %d bytes: one error for the file, not one per rule", len(err.Error()))
			}
		})
	}
}

// A file over MaxFileSize is refused from its size: ReadFile reads none
// of it (a file the process may not read shows it), and ParseFile refuses
// the same bytes handed to it.
func TestReadFileSize(t *testing.T) {
	path := filepath.Join(t.TempDir(), "big.yaml")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(MaxFileSize + 1); err != nil { // sparse: no disk
		t.Fatal(err)
	}
	f.Close()
	_, err = ReadFile(path)
	var pe *fs.PathError
	if !errors.As(err, &pe) || pe.Path != path || !strings.Contains(err.Error(), fmt.Sprintf("policy file of %d bytes, more than the limit of %d bytes", MaxFileSize+1, MaxFileSize)) {
		t.Fatalf("ReadFile: %v", err)
	}
	if _, err := ParseFile(make([]byte, MaxFileSize+1)); err == nil || !strings.Contains(err.Error(), "more than the limit") {
		t.Errorf("ParseFile: %v", err)
	}
	if err := os.WriteFile(path, []byte(policyYAML("p", 1, 0)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadFile(path); err != nil {
		t.Errorf("small file: %v", err)
	}
}

// countRules counts the "pattern" keys of each YAML document, and only
// them: the refusal before decoding never refuses a valid policy.
func TestCountRules(t *testing.T) {
	tests := []struct {
		name, data string
		wantErr    string
	}{
		{name: "at the limit", data: policyYAML("p", policy.MaxRules, 0)},
		{name: "over the limit, block", data: policyYAML("p", policy.MaxRules+1, 0),
			wantErr: "document 0: DNSPolicy: spec.rules (counted before decoding): policy has 10001 rules, more than the limit of 10000"},
		{name: "over the limit, flow", data: flowYAML(90_000), wantErr: "policy has 90000 rules, more than the limit of 10000"},
		{name: "over the limit, second document", data: policyYAML("a", 10, 0) + "---\n" + policyYAML("b", policy.MaxRules+5, 0),
			wantErr: "document 1: DNSPolicy: spec.rules (counted before decoding): policy has 10005 rules"},
		{name: "numbered as the decoder numbers them", data: "---\n" + policyYAML("b", policy.MaxRules+1, 0),
			wantErr: "document 0: DNSPolicy: spec.rules (counted before decoding)"},
		{name: "numbered after a comment", data: "# policies\n---\n" + policyYAML("b", policy.MaxRules+1, 0),
			wantErr: "document 1: DNSPolicy: spec.rules (counted before decoding)"},
		{name: "several documents at the limit", data: policyYAML("a", policy.MaxRules, 0) + "---\n" + policyYAML("b", policy.MaxRules, 0)},
		{name: "quoted keys", data: strings.Repeat(`- {"pattern": a.com, 'pattern' : b}`+"\n", policy.MaxRules/2+1),
			wantErr: "policy has 10002 rules"},
		{name: "comments, values and other words are not keys", data: policyYAML("p", policy.MaxRules-1, 0) +
			"# - pattern: commented.out\n  - {pattern: pattern.example, action: Allow, patterns: 1, mypattern: 2}\n"},
		{name: "JSON is counted after decoding", data: `{"spec": {"rules": [` + strings.Repeat(`{"pattern": "a.com"},`, policy.MaxRules+1) + `]}}`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := countRules([]byte(tc.data))
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, policy.ErrLimit) {
				t.Fatalf("error %v, want one with %q", err, tc.wantErr)
			}
		})
	}
}
