package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/cmd/internal/cli"
)

func TestValidateWarnsOfPublicNames(t *testing.T) {
	path := filepath.Join(t.TempDir(), "entries.yaml")
	data := "entries:\n" +
		"- hostname: www.google.com\n  addresses: [10.0.0.1]\n  aliases: [mail.google.com, mail.corp.example]\n" +
		"- hostname: \"*.apps.dev\"\n  addresses: [10.0.0.2]\n" +
		"- hostname: api.corp.example\n  addresses: [10.0.0.3]\n" +
		"- hostname: db.internal\n  addresses: [10.0.0.4]\n"
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := cli.Run(context.Background(), []string{"validate", "--entries", path}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d, want 0 (warnings do not fail): %s%s", code, stdout.String(), stderr.String())
	}
	want := "ok      " + path + " (4 entries, 0 zones)\n" +
		"WARNING " + path + `: "www.google.com" overrides a public name (.com is a top-level domain) for every agent that sees it` + "\n" +
		"WARNING " + path + `: "mail.google.com" overrides a public name (.com is a top-level domain) for every agent that sees it` + "\n" +
		"WARNING " + path + `: "*.apps.dev" overrides a public name (.dev is a top-level domain) for every agent that sees it` + "\n"
	if diff := cmp.Diff(want, stdout.String()); diff != "" {
		t.Errorf("stdout (-want +got):\n%s", diff)
	}
	stdout.Reset()
	if code := cli.Run(context.Background(), []string{"validate", "--quiet", "--entries", path}, &stdout, &stderr); code != 0 || stdout.Len() != 0 {
		t.Errorf("--quiet: exit %d, stdout %q; want 0 and nothing", code, stdout.String())
	}
}
