package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/cmd/internal/cli"
)

// TestCLIReferenceCoversSidecar: docs/cli.md documents the agent command
// once, from the full binary, and says the sidecar's binary has the same
// one. This holds while the sidecar's `agent --help` is the full binary's
// with only the program's name changed.
func TestCLIReferenceCoversSidecar(t *testing.T) {
	doc, err := os.ReadFile("../../docs/cli.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), "\n## meshdns agent\n\n```\n")
	if !ok {
		t.Fatal("docs/cli.md has no meshdns agent section")
	}
	want, _, _ := strings.Cut(section, "```\n")
	var stdout, stderr bytes.Buffer
	if code := cli.Run(context.Background(), []string{"agent", "--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("meshdns-agent agent --help: exit %d: %s", code, stderr.String())
	}
	got := strings.Replace(stdout.String(), "usage: meshdns-agent agent", "usage: meshdns agent", 1)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("meshdns-agent agent --help differs from docs/cli.md's meshdns agent (run make docs; if the sidecar's agent has flags of its own, document them) (-docs/cli.md +meshdns-agent):\n%s", diff)
	}
}
