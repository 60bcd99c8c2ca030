package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane/policysource"
	"github.com/meshdns/meshdns/pkg/policy"
)

func TestValidatePolicy(t *testing.T) {
	dir := t.TempDir()
	write := func(name, data string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	example := filepath.Join("..", "..", "examples", "kubernetes", "dnspolicy", "allow-stripe.yaml")
	twice := write("twice.yaml", "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: twice, namespace: shop}\n"+
		"spec: {rules: [{pattern: a.com, action: Allow}, {pattern: A.com., action: Deny}]}\n")
	entries := write("entries.yaml", "entries: []\n")
	sized := func(name string, rules, minute int) string {
		var b strings.Builder
		fmt.Fprintf(&b, "apiVersion: meshdns.io/v1alpha1\nkind: DNSPolicy\nmetadata: {name: %s, namespace: shop, creationTimestamp: \"2026-01-01T00:%02d:00Z\"}\nspec:\n  rules:\n", name, minute)
		for i := range rules {
			fmt.Fprintf(&b, "  - {pattern: %s%d.example.com, action: Allow}\n", name, i)
		}
		return b.String()
	}
	atLimit := write("at-limit.yaml", sized("max", policy.MaxRules, 0))
	overLimit := write("over-limit.yaml", sized("over", policy.MaxRules+1, 0))
	huge := filepath.Join(dir, "huge.yaml")
	if err := os.WriteFile(huge, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(huge, 100<<20); err != nil { // sparse: never read
		t.Fatal(err)
	}
	folder := filepath.Join(dir, "shop")
	if err := os.Mkdir(folder, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]string{"a.yaml": sized("a", 6000, 1), "b.yaml": sized("b", 5000, 2)} {
		if err := os.WriteFile(filepath.Join(folder, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string // line prefixes, in order
	}{
		{name: "the example", args: []string{"--policy", example}, code: 0,
			stdout: []string{"ok      " + example + " (1 DNSPolicy: default/allow-stripe, 2 rules)"}},
		{name: "conflict", args: []string{"--policy=" + twice}, code: 1,
			stdout: []string{"INVALID " + twice + `: document 0: DNSPolicy shop/twice: spec.rules[1]: pattern "A.com." (a.com. Deny) is in conflict with spec.rules[0]`}},
		{name: "with entries", args: []string{"--policy", example, "--entries", entries, "--quiet"}, code: 0, stdout: []string{""}},
		{name: "bad policy, good entries", args: []string{entries, "-policy", twice}, code: 1,
			stdout: []string{"INVALID " + twice, "ok      " + entries}},
		{name: "missing", args: []string{"--policy", filepath.Join(dir, "nope.yaml")}, code: 1, stdout: []string{"INVALID " + filepath.Join(dir, "nope.yaml") + ": no such file"}},
		{name: "rules at the limit", args: []string{"--policy", atLimit}, code: 0,
			stdout: []string{"ok      " + atLimit + " (1 DNSPolicy: shop/max, 10000 rules)"}},
		{name: "rules over the limit", args: []string{"--policy", overLimit}, code: 1,
			stdout: []string{"INVALID " + overLimit + ": document 0: DNSPolicy: spec.rules (counted before decoding): policy has 10001 rules, more than the limit of 10000"}},
		{name: "file over the size limit", args: []string{"--policy", huge}, code: 1,
			stdout: []string{fmt.Sprintf("INVALID %s: policy file of %d bytes, more than the limit of %d bytes", huge, 100<<20, policysource.MaxFileSize)}},
		{name: "a namespace's policies over the limit together", args: []string{"--policy", folder}, code: 1,
			stdout: []string{"ok      " + filepath.Join(folder, "a.yaml"), "ok      " + filepath.Join(folder, "b.yaml"),
				"INVALID " + filepath.Join(folder, "b.yaml") + ": DNSPolicy shop/b: its 5000 rules and the 6000 of the older policies of namespace shop (shop/a) come to 11000, more than the limit of 10000"}},
		{name: "help mentions it", args: []string{"--help"}, code: 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.Run(context.Background(), append([]string{"validate"}, tc.args...), &stdout, &stderr)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, tc.code, stdout.String(), stderr.String())
			}
			if tc.name == "help mentions it" {
				if !strings.Contains(stdout.String()+stderr.String(), "--policy FILE_OR_FOLDER") {
					t.Errorf("--help lacks --policy: %s", stdout.String())
				}
				return
			}
			got := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
			if len(got) != len(tc.stdout) {
				t.Fatalf("stdout has %d lines, want %d:\n%s", len(got), len(tc.stdout), stdout.String())
			}
			for i, w := range tc.stdout {
				if !strings.HasPrefix(got[i], w) {
					t.Errorf("line %d = %q, want it to start with %q", i, got[i], w)
				}
			}
		})
	}
}
