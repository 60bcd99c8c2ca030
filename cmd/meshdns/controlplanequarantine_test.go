package main

import (
	"flag"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane"
)

func TestQuarantineFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		want    [2]any
		wantErr string
	}{
		{name: "defaults", want: [2]any{3, 0.01}},
		{name: "set", args: []string{"--quarantine-min-agents", "5", "--quarantine-fraction", "0.05"}, want: [2]any{5, 0.05}},
		{name: "no agent", args: []string{"--quarantine-min-agents", "0"}, wantErr: "--quarantine-min-agents 0"},
		{name: "fraction over 1", args: []string{"--quarantine-fraction", "2"}, wantErr: "--quarantine-fraction 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := newQuarantineFlags(fs)
			if err := cli.ParseFlags(fs, tc.args, nil); err != nil {
				t.Fatal(err)
			}
			var cfg controlplane.Config
			err := f.apply(&cfg)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("apply: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, [2]any{cfg.QuarantineMinAgents, cfg.QuarantineFraction}); diff != "" {
				t.Errorf("min agents, fraction (-want +got):\n%s", diff)
			}
		})
	}
}

func TestQuarantineFlagsDocumented(t *testing.T) {
	readme, err := os.ReadFile("../../controlplane/README.md")
	if err != nil {
		t.Fatal(err)
	}
	fs := flag.NewFlagSet("controlplane", flag.ContinueOnError)
	newQuarantineFlags(fs)
	fs.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(string(readme), "| `--"+f.Name+"`") {
			t.Errorf("--%s is not in the Configuration table of controlplane/README.md", f.Name)
		}
	})
}
