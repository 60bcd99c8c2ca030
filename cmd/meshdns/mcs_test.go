package main

import (
	"flag"
	"os"
	"strings"
	"testing"
)

// TestMCSFlagsDocumented: the multi-cluster flags are in the Configuration
// table of controlplane/README.md.
func TestMCSFlagsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../controlplane/README.md")
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
	f := newMCSFlags(fs)
	if !f.on {
		t.Error("--multicluster defaults to false, want true (the source serves only while the CRD exists)")
	}
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(string(readme), "| `--"+f.Name+"`") {
			t.Errorf("--%s is not in the Configuration table of controlplane/README.md", f.Name)
		}
	})
}
