package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/internal/testkit/kubetest"
)

// TestFleetFlagsHelp: status and top describe the replica-finding flags
// alike, since one definition makes them.
func TestFleetFlagsHelp(t *testing.T) {
	help := func(cmd string) string {
		var out bytes.Buffer
		if code := cli.Run(context.Background(), []string{cmd, "--help"}, &out, io.Discard); code != 0 {
			t.Fatalf("%s --help: exit status %d", cmd, code)
		}
		var keep []string
		lines := strings.Split(out.String(), "\n")
		for i, l := range lines {
			for _, f := range []string{"--kubeconfig ", "--system-namespace ", "--selector "} {
				if strings.HasPrefix(l, "  "+f) && i+1 < len(lines) {
					keep = append(keep, l, lines[i+1])
				}
			}
		}
		return strings.Join(keep, "\n")
	}
	status, top := help("status"), help("top")
	if strings.Count(status, "\n") != 5 {
		t.Fatalf("status --help: want the three fleet flags, got:\n%s", status)
	}
	if diff := cmp.Diff(status, top); diff != "" {
		t.Errorf("status and top describe the fleet flags differently (-status +top):\n%s", diff)
	}
}

// TestFleetFlagsFindReplicas runs status and top with --kubeconfig
// against a real API server: both look for the replicas where
// --system-namespace (or its environment variable) and --selector say.
func TestFleetFlagsFindReplicas(t *testing.T) {
	c := kubetest.Start(t)
	ns := c.Namespace(t, "fleet")
	missing := filepath.Join(t.TempDir(), "nope")
	for _, cmd := range []string{"status", "top"} {
		for _, tc := range []struct {
			name   string
			args   []string
			env    string // MESHDNS_SYSTEM_NAMESPACE
			stderr string
		}{
			{name: "flags", args: []string{"--kubeconfig", c.Kubeconfig, "--system-namespace", ns, "--selector", "app=none"},
				stderr: "no control plane pod in namespace " + ns + " with labels app=none (--system-namespace, --selector)"},
			{name: "environment", args: []string{"--kubeconfig", c.Kubeconfig}, env: ns,
				stderr: "no control plane pod in namespace " + ns + " with labels app.kubernetes.io/name=meshdns-controlplane"},
			{name: "missing kubeconfig", args: []string{"--kubeconfig", missing}, stderr: "kubeconfig: "},
		} {
			t.Run(cmd+"/"+tc.name, func(t *testing.T) {
				t.Setenv("MESHDNS_SYSTEM_NAMESPACE", tc.env) // restored after the test
				if tc.env == "" {
					os.Unsetenv("MESHDNS_SYSTEM_NAMESPACE")
				}
				var stderr bytes.Buffer
				code := cli.Run(context.Background(), append([]string{cmd}, tc.args...), io.Discard, &stderr)
				if code != 1 || !strings.Contains(stderr.String(), tc.stderr) {
					t.Errorf("exit status %d, stderr %q; want 1 and %q", code, stderr.String(), tc.stderr)
				}
			})
		}
	}
}

// TestFleetByDefault: without --admin-addr, status and top read the
// replicas through the cluster kubectl would use ($KUBECONFIG here), as
// analyze does; analyze takes the same flags.
func TestFleetByDefault(t *testing.T) {
	c := kubetest.Start(t)
	ns := c.Namespace(t, "fleet-default")
	t.Setenv("KUBECONFIG", c.Kubeconfig)
	for _, args := range [][]string{{"status"}, {"top"}, {"status", "-n", "demo", "-o", "json"}, {"top", "-A"}} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var stderr bytes.Buffer
			code := cli.Run(context.Background(), append(args, "--system-namespace", ns, "--timeout", "30"), io.Discard, &stderr)
			want := "no control plane pod in namespace " + ns
			if code != 1 || !strings.Contains(stderr.String(), want) {
				t.Errorf("exit status %d, stderr %q; want 1 and %q", code, stderr.String(), want)
			}
		})
	}
}

// TestFleetFlagMistakes: the shared flags' mistakes are usage errors.
func TestFleetFlagMistakes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{args: []string{"status", "-A", "-n", "demo"}, want: "--all-namespaces and --namespace demo exclude each other"},
		{args: []string{"top", "--admin-addr", "127.0.0.1:1", "--kubeconfig", "k"}, want: "--admin-addr and --kubeconfig exclude each other"},
		{args: []string{"analyze", "-o", "yaml"}, want: `--output "yaml": want table or json`},
		{args: []string{"status", "--timeout", "soon"}, want: `--timeout "soon": want a duration`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.Run(context.Background(), tc.args, &stdout, &stderr)
			if code != 2 || stdout.Len() != 0 || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit status %d, stdout %q, stderr %q; want 2, nothing and %q", code, stdout.String(), stderr.String(), tc.want)
			}
		})
	}
}
