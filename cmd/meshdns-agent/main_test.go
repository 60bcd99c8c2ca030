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
