package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/cmd/internal/cli"
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
