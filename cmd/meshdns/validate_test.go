package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/cmd/internal/cli"
)

// TestValidateForms: validate reads every form meshdns reads or ships
// (the bare file, its ConfigMap, a stream of objects) and lists every
// fault of a file with its file, object and field.
func TestValidateForms(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	typed := write("typed.yaml", "entries:\n- hostname: a.example\n  ttl: -1\n- hostname: b.example\n  addresses: [10.0.0.300]\n- hostname: c.example\n  ports: [{name: http, port: web}]\n")
	stream := write("stream.yaml", `apiVersion: v1
kind: ConfigMap
metadata: {name: meshdns-entries, namespace: dns}
data:
  entries.yaml: |
    entries:
    - hostname: api.corp.example
      addresses: [10.0.0.1]
---
apiVersion: v1
kind: ConfigMap
metadata: {name: meshdns-inject, namespace: dns}
data:
  template.yaml: |
    dnsPort: 15020
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: dns}
---
apiVersion: meshdns.io/v1alpha1
kind: DNSPolicy
metadata: {name: p, namespace: dns}
spec: {bogus: 1}
`)
	agentEnv := write("agentenv.yaml", "agentEnv:\n- {name: GODEBUG, value: madvdontneed=1}\n- name: NODE_NAME\n  valueFrom: {fieldRef: {fieldPath: spec.nodeName}}\n")
	reservedEnv := write("reservedenv.yaml", "agentEnv: [{name: GOMEMLIMIT, value: 1GiB}]\n")
	tests := []struct {
		name string
		args []string
		code int
		want []string // stdout lines
	}{
		{name: "a template with the agent's environment", args: []string{"--inject-template", agentEnv}, code: 0,
			want: []string{"ok      " + agentEnv + " (injection template, image ghcr.io/meshdns/meshdns:latest)"}},
		{name: "a template setting a variable meshdns sets", args: []string{"--inject-template", reservedEnv}, code: 1,
			want: []string{"INVALID " + reservedEnv + ": invalid template: agentEnv: GOMEMLIMIT is set by the webhook"}},
		{name: "the shipped inject template ConfigMap", args: []string{"--inject-template", "../../examples/kubernetes/20-inject-template.yaml"}, code: 0,
			want: []string{"ok      ../../examples/kubernetes/20-inject-template.yaml: ConfigMap meshdns-system/meshdns-inject key template.yaml (injection template, image ghcr.io/meshdns/meshdns:latest)"}},
		{name: "the shipped entries ConfigMap", args: []string{"--entries", "../../examples/kubernetes/25-entries.yaml"}, code: 0,
			want: []string{"ok      ../../examples/kubernetes/25-entries.yaml: ConfigMap meshdns-system/meshdns-entries key entries.yaml (0 entries, 0 zones)"}},
		{name: "every type error, with its entry and field", args: []string{typed}, code: 1, want: []string{
			"INVALID " + typed + `: entries[0] "a.example": ttl: number -1 is not a valid whole number of 0 or more`,
			"INVALID " + typed + `: entries[1] "b.example": address "10.0.0.300": not an IP address`,
			"INVALID " + typed + `: entries[2] "c.example": ports.port: string is not a valid whole number`,
		}},
		{name: "objects: checked, skipped and named", args: []string{"-f", stream}, code: 1, want: []string{
			"ok      " + stream + ": ConfigMap dns/meshdns-entries key entries.yaml (1 entries, 0 zones)",
			"INVALID " + stream + ": ConfigMap dns/meshdns-inject key template.yaml: invalid template: dnsPort 15020, adminPort 15020 and probePort 15121 must differ",
			"skipped " + stream + ": Deployment dns/web (not a meshdns input)",
			"INVALID " + stream + `: DNSPolicy dns/p: DNSPolicy: json: unknown field "bogus"`,
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.Run(context.Background(), append([]string{"validate"}, tc.args...), &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stderr %q", code, tc.code, stderr.String())
			}
			got := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("stdout (-want +got):\n%s", diff)
			}
		})
	}
}

// TestValidateJSON: --output json lists the checks as analyze lists its
// findings, with the same exit status as the table.
func TestValidateJSON(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := cli.Run(context.Background(), []string{"validate", "-o", "json", "-f", "../../examples/kubernetes/26-forwarding.yaml",
		"--policy", "../../examples/kubernetes/dnspolicy"}, &stdout, &stderr)
	if code != 0 {
		t.Fatalf("exit %d; stderr %q", code, stderr.String())
	}
	var got []check
	if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
		t.Fatalf("stdout is not a JSON list of checks: %v\n%s", err, stdout.String())
	}
	want := []check{
		{File: "../../examples/kubernetes/dnspolicy/allow-stripe.yaml", Kind: "DNSPolicy", Status: "ok", Summary: "1 DNSPolicy: default/allow-stripe, 2 rules"},
		{File: "../../examples/kubernetes/26-forwarding.yaml", Object: "ConfigMap meshdns-system/meshdns-forwarding key rules.yaml", Kind: "forwarding-rules", Status: "ok", Summary: "0 forwarding rules"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("checks (-want +got):\n%s", diff)
	}
}

// TestValidateHelp: --policy is a listed flag, and the usage error of an
// empty command line names every input.
func TestValidateHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := cli.Run(context.Background(), []string{"validate", "--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, f := range []string{"  --policy value", "  -f, --filename value", "  -o, --output string", "  --entries value", "  --inject-template value"} {
		if !strings.Contains(stdout.String(), "\n"+f+"\n") {
			t.Errorf("--help lacks the line %q:\n%s", f, stdout.String())
		}
	}
	stdout.Reset()
	if code := cli.Run(context.Background(), []string{"validate"}, &stdout, &stderr); code != 2 {
		t.Errorf("no input: exit %d, want 2", code)
	}
	for _, in := range []string{"-f", "--entries", "--inject-template", "--policy"} {
		if !strings.Contains(stderr.String(), in) {
			t.Errorf("no input: %q does not name %s", stderr.String(), in)
		}
	}
}
