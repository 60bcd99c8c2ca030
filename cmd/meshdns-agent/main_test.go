package main

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/cmd/internal/cli"
)

// TestCommands: the sidecar's binary has the agent and version commands
// and nothing else (what it links is internal/archtest's TestAgentBuild).
func TestCommands(t *testing.T) {
	var out bytes.Buffer
	if code := cli.Run(context.Background(), []string{"--help"}, &out, io.Discard); code != 0 {
		t.Fatalf("--help: exit status %d", code)
	}
	var got []string
	_, list, _ := strings.Cut(out.String(), "commands:\n")
	for line := range strings.Lines(list) {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(line, "  ") {
			got = append(got, f[0])
		}
	}
	if diff := cmp.Diff([]string{"agent", "version"}, got); diff != "" {
		t.Errorf("commands (-want +got):\n%s\n%s", diff, out.String())
	}
	for _, args := range [][]string{{"controlplane"}, {"iptables", "print"}} {
		var stderr bytes.Buffer
		if code := cli.Run(context.Background(), args, io.Discard, &stderr); code != 2 || !strings.Contains(stderr.String(), "unknown command") {
			t.Errorf("%q: exit status %d, stderr %q; want 2 and unknown command", args, code, stderr.String())
		}
	}
}

// TestProgramName: the sidecar's binary names itself meshdns-agent in
// what it prints for people (its version is reported to the control
// plane without a name, from cli.BuildInfo).
func TestProgramName(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{name: "help", args: []string{"--help"}, stdout: "usage: meshdns-agent <command> [flags]\n"},
		{name: "help footer", args: []string{"--help"}, stdout: "Run 'meshdns-agent <command> --help' for the flags of a command; 'meshdns-agent --version' for the version.\n"},
		{name: "command help", args: []string{"agent", "--help"}, stdout: "usage: meshdns-agent agent [flags]\n"},
		{name: "--version", args: []string{"--version"}, stdout: "meshdns-agent dev (revision "},
		{name: "version", args: []string{"version"}, stdout: "meshdns-agent dev (revision "},
		{name: "unknown command", args: []string{"iptables"}, code: 2, stderr: "meshdns-agent: unknown command \"iptables\"\nRun 'meshdns-agent --help' for usage.\n"},
		{name: "unknown flag", args: []string{"agent", "--bogus"}, code: 2, stderr: "meshdns-agent agent: unknown flag --bogus\nRun 'meshdns-agent agent --help' for usage.\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := cli.Run(context.Background(), tt.args, &stdout, &stderr); code != tt.code {
				t.Errorf("exit status %d, want %d (stderr %q)", code, tt.code, stderr.String())
			}
			if !strings.Contains(stdout.String(), tt.stdout) {
				t.Errorf("stdout %q, want it to contain %q", stdout.String(), tt.stdout)
			}
			if !strings.Contains(stderr.String(), tt.stderr) {
				t.Errorf("stderr %q, want it to contain %q", stderr.String(), tt.stderr)
			}
			if out := stdout.String() + stderr.String(); strings.Contains(strings.ReplaceAll(out, "meshdns-agent", ""), "meshdns ") {
				t.Errorf("output still names the program meshdns:\n%s", out)
			}
		})
	}
}
