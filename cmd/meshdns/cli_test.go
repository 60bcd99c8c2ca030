package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestExitCodes runs command lines through run, what main does, and checks
// the exit status and what is written where: help on stdout with 0, a
// mistake in the command line as one line plus a hint with 2, a failure
// with 1, never after a "started" line.
func TestExitCodes(t *testing.T) {
	dir := t.TempDir()
	badTemplate := filepath.Join(dir, "template.yaml")
	if err := os.WriteFile(badTemplate, []byte("imgae: typo\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A kubeconfig that is never dialled: the template check comes first.
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: \"https://127.0.0.1:1\"}}]\n"+
		"contexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\nusers: [{name: u, user: {token: t}}]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		args       []string
		code       int
		stdout     string // substring; "" means empty
		stderr     string // substring; "" means empty
		stderrRows int    // lines on stderr, when checked
	}{
		{name: "help", args: []string{"--help"}, code: 0, stdout: "usage: meshdns <command>"},
		{name: "-h", args: []string{"-h"}, code: 0, stdout: "commands:"},
		{name: "help of a command", args: []string{"help", "agent"}, code: 0, stdout: "--dns-addr"},
		{name: "agent --help", args: []string{"agent", "--help"}, code: 0, stdout: "--upstream"},
		{name: "controlplane -h", args: []string{"controlplane", "-h"}, code: 0, stdout: "--log-format"},
		{name: "iptables --help", args: []string{"iptables", "--help"}, code: 0, stdout: "apply  install the rules"},
		{name: "validate --help", args: []string{"validate", "--help"}, code: 0, stdout: "--inject-template"},
		{name: "status --help", args: []string{"status", "--help"}, code: 0, stdout: "--admin-addr"},
		{name: "--version", args: []string{"--version"}, code: 0, stdout: "meshdns dev (revision "},
		{name: "version", args: []string{"version"}, code: 0, stdout: "meshdns dev (revision "},
		{name: "no command", args: nil, code: 2, stderr: "meshdns: no command given\nRun 'meshdns --help' for usage.\n", stderrRows: 2},
		{name: "unknown command", args: []string{"agnet"}, code: 2, stderr: `meshdns: unknown command "agnet"`, stderrRows: 2},
		{name: "flag before the command", args: []string{"--upstream", "1.2.3.4"}, code: 2, stderr: "flag --upstream given before the command", stderrRows: 2},
		{name: "unknown flag", args: []string{"agent", "--bogus"}, code: 2, stderr: "meshdns agent: unknown flag --bogus\nRun 'meshdns agent --help' for usage.\n", stderrRows: 2},
		{name: "bad flag value", args: []string{"agent", "--ttl", "many"}, code: 2, stderr: `meshdns agent: --ttl "many": want a duration`, stderrRows: 2},
		{name: "negative duration", args: []string{"controlplane", "--debounce=-1s"}, code: 2, stderr: "--debounce -1s: a duration must not be negative", stderrRows: 2},
		{name: "negative duration in the environment", args: []string{"status", "--timeout=-1s"}, code: 2, stderr: "--timeout -1s", stderrRows: 2},
		{name: "iptables without action", args: []string{"iptables"}, code: 2, stderr: "meshdns iptables: no action given", stderrRows: 2},
		{name: "bad log format", args: []string{"controlplane", "--log-format", "xml"}, code: 2, stderr: `--log-format "xml": want text or json`, stderrRows: 2},
		{name: "table file and control plane", args: []string{"agent", "--nametable-file", "t.json", "--control-plane", "cp:15010"}, code: 2, stderr: "--nametable-file and --control-plane exclude each other", stderrRows: 2},
		{name: "listen address without port", args: []string{"agent", "--dns-addr", "127.0.0.1"}, code: 2, stderr: `--dns-addr "127.0.0.1": want host:port`, stderrRows: 2},
		{name: "bad admin address", args: []string{"controlplane", "--admin-addr", "localhost"}, code: 2, stderr: `--admin-addr "localhost": want host:port`, stderrRows: 2},
		{name: "no way to authenticate agents", args: []string{"controlplane", "--entries", "../../examples/entries"}, code: 2,
			stderr: "no way to authenticate agents", stderrRows: 3}, // "Kubernetes source off", the error, the usage hint
		{name: "nothing to serve", args: []string{"controlplane", "--log-level", "warn"}, code: 2, stderr: "meshdns controlplane: no names to serve: give --entries", stderrRows: 2},
		{name: "unreadable TLS files", args: []string{"controlplane", "--insecure-allow-unauthenticated", "--entries", "../../examples/entries", "--tls-cert", filepath.Join(dir, "tls.crt"),
			"--tls-key", filepath.Join(dir, "tls.key"), "--log-level", "warn"}, code: 1, stderr: "load key pair", stderrRows: 2}, // the insecure warning, then the error,
		{name: "iptables without resolv.conf", args: []string{"iptables", "print", "--proxy-uid", "1337", "--resolv-conf", filepath.Join(dir, "nope.conf")}, code: 1,
			stderr: "meshdns: --resolv-conf " + filepath.Join(dir, "nope.conf") + ": no such file or directory\n", stderrRows: 1},
		{name: "flags that go together", args: []string{"controlplane", "--webhook-cert", "c.pem"}, code: 2, stderr: "--webhook-cert and --webhook-key go together", stderrRows: 2},
		{name: "unreadable table file", args: []string{"agent", "--nametable-file", filepath.Join(dir, "nope.json")}, code: 1,
			stderr: "meshdns: --nametable-file " + filepath.Join(dir, "nope.json") + ": no such file or directory\n", stderrRows: 1},
		{name: "unreadable resolv.conf", args: []string{"agent", "--resolv-conf", filepath.Join(dir, "nope.conf")}, code: 1,
			stderr: "--resolv-conf " + filepath.Join(dir, "nope.conf") + ": no such file", stderrRows: 1},
		{name: "unreadable client CA", args: []string{"agent", "--resolv-conf", "../../examples/resolv.conf", "--control-plane", "127.0.0.1:1",
			"--ca-cert", filepath.Join(dir, "ca.pem")}, code: 1, stderr: "--ca-cert/--tls-cert/--tls-key: read CA file", stderrRows: 1},
		{name: "unreadable entries", args: []string{"controlplane", "--entries", filepath.Join(dir, "entries")}, code: 1,
			stderr: "meshdns: --entries " + filepath.Join(dir, "entries") + ": no such file or directory\n", stderrRows: 1},
		{name: "bad injection template", args: []string{"controlplane", "--entries", "../../examples/entries", "--webhook-secret", "ns/name",
			"--kubeconfig", kubeconfig, "--inject-template", badTemplate, "--log-level", "warn"}, code: 1, stderr: `unknown field "imgae"`, stderrRows: 1},
		{name: "unreadable webhook certificate", args: []string{"controlplane", "--entries", "../../examples/entries", "--webhook-cert", "c.pem",
			"--webhook-key", "k.pem"}, code: 1, stderr: "meshdns: --webhook-cert/--webhook-key: load key pair c.pem k.pem: open c.pem: no such file or directory\n", stderrRows: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.Run(context.Background(), tc.args, &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit status %d, want %d (stderr %q)", code, tc.code, stderr.String())
			}
			check := func(what, got, want string) {
				t.Helper()
				if want == "" && got != "" || !strings.Contains(got, want) {
					t.Errorf("%s = %q, want it to contain %q", what, got, want)
				}
			}
			check("stdout", stdout.String(), tc.stdout)
			check("stderr", stderr.String(), tc.stderr)
			if tc.stderrRows > 0 {
				if n := strings.Count(stderr.String(), "\n"); n != tc.stderrRows {
					t.Errorf("stderr has %d lines, want %d:\n%s", n, tc.stderrRows, stderr.String())
				}
			}
			if strings.Contains(stderr.String(), "start") {
				t.Errorf("a refused command line logged a start:\n%s", stderr.String())
			}
		})
	}
}

// metricLine fetches url and returns the sample line of meshdns_build_info.
func metricLine(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, _ := io.ReadAll(res.Body)
	m := regexp.MustCompile(`(?m)^meshdns_build_info\{.*\} 1$`).FindString(string(body))
	if m == "" {
		t.Errorf("%s has no meshdns_build_info sample", url)
	}
	return m
}

// TestStatusAndBuildInfo runs a control plane and a real agent connected to
// it with JSON logs, then `meshdns status` against the control plane's
// admin address; both /metrics carry meshdns_build_info.
func TestStatusAndBuildInfo(t *testing.T) {
	grpcAddr, cpAdmin, dnsAddr, agentAdmin := testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t), testenv.FreeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var agentLog testenv.Buffer
	start := func(name string, log io.Writer, args ...string) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if code := cli.Run(ctx, args, io.Discard, log); code != 0 {
				t.Errorf("%s exited with %d", name, code)
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	start("controlplane", io.Discard, "controlplane", "--insecure-allow-unauthenticated", "--entries", "../../examples/entries", "--grpc-addr", grpcAddr,
		"--admin-addr", cpAdmin, "--debounce", "10ms", "--log-level", "error")
	start("agent", &agentLog, "agent", "--control-plane", grpcAddr, "--namespace", "team-a", "--pod-name", "web-0",
		"--resolv-conf", "../../examples/resolv.conf", "--upstream", "127.0.0.1", "--dns-addr", dnsAddr,
		"--admin-addr", agentAdmin, "--log-format", "json")

	status := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := cli.Run(context.Background(), append([]string{"status", "--admin-addr", cpAdmin}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	synced := regexp.MustCompile(`(?m)^team-a\s+web-0\s+SYNCED\s+\S+\s+\S+\s+0\s+-\s+-\s+dev\s`) // no NACK, no settings
	testenv.Eventually(t, "status shows the agent SYNCED", 10*time.Second, func() bool {
		code, out, _ := status()
		return code == 0 && synced.MatchString(out)
	})
	_, out, _ := status()
	if !strings.HasPrefix(out, "NAMESPACE  POD    STATUS  ACKED") {
		t.Errorf("status table header:\n%s", out)
	}

	code, out, _ := status("--output", "json", "--namespace", "team-a")
	var agents []server.AgentInfo
	if err := json.Unmarshal([]byte(out), &agents); code != 0 || err != nil || len(agents) != 1 {
		t.Fatalf("status --output json: exit %d, %v, %q", code, err, out)
	}
	if a := agents[0]; a.Pod != "web-0" || a.Acked == "" || a.Acked != a.View {
		t.Errorf("status json = %+v, want web-0 acked at the current version", a)
	}
	if code, out, _ := status("--namespace", "elsewhere"); code != 0 || !strings.HasPrefix(out, "no agents connected") {
		t.Errorf("status of an empty namespace: exit %d, %q", code, out)
	}

	for _, url := range []string{"http://" + cpAdmin + "/metrics", "http://" + agentAdmin + "/metrics"} {
		line := metricLine(t, url)
		for _, label := range []string{`version="dev"`, `revision="`, `goversion="go1.`} {
			if !strings.Contains(line, label) {
				t.Errorf("%s: %q lacks %s", url, line, label)
			}
		}
	}

	// --log-format json: every line the agent wrote is one JSON object.
	lines := strings.Split(strings.TrimSpace(agentLog.String()), "\n")
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil || rec["msg"] == nil {
			t.Errorf("agent log line is not a JSON record: %q (%v)", l, err)
		}
	}
	if len(lines) < 2 {
		t.Errorf("agent logged %d lines, want its start and readiness", len(lines))
	}
}

func TestStatusErrors(t *testing.T) {
	notJSON := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "<html>") }))
	t.Cleanup(notJSON.Close)
	forbidden := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "debug endpoints need a token\nmore", http.StatusForbidden)
	}))
	t.Cleanup(forbidden.Close)
	closed := testenv.FreeAddr(t) // nothing listens there any more
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr string
	}{
		{name: "nothing listens", args: []string{"--admin-addr", closed}, code: 1, stderr: "nothing listens at http://" + closed + "/debug/agents (is the control plane running, and its admin port forwarded? kubectl"},
		{name: "not a control plane", args: []string{"--admin-addr", notJSON.URL}, code: 1, stderr: "did not answer with the agent list"},
		{name: "refused", args: []string{"--admin-addr", forbidden.URL}, code: 1, stderr: "403 Forbidden: debug endpoints need a token\n"},
		{name: "bad output", args: []string{"--output", "yaml"}, code: 2, stderr: `--output "yaml": want table or json`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.Run(context.Background(), append([]string{"status"}, tc.args...), &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, stderr.String(), tc.code, tc.stderr)
			}
		})
	}
}

func TestSyncState(t *testing.T) {
	tests := []struct {
		name string
		a    server.AgentInfo
		want string
	}{
		{name: "acked the current version", a: server.AgentInfo{Sent: "v2", Acked: "v2", View: "v2"}, want: "SYNCED"},
		{name: "current version on its way", a: server.AgentInfo{Sent: "v2", Acked: "v1", View: "v2"}, want: "SENT"},
		{name: "refused a version", a: server.AgentInfo{Sent: "v2", Acked: "v1", View: "v2", Nacks: 1, LastNack: "bad"}, want: "NACKED"},
		{name: "synced again after a NACK", a: server.AgentInfo{Sent: "v3", Acked: "v3", View: "v3", Nacks: 1, LastNack: "bad"}, want: "SYNCED"},
		{name: "not sent yet", a: server.AgentInfo{Sent: "v1", Acked: "v1", View: "v2"}, want: "STALE"},
		{name: "nothing acked yet", a: server.AgentInfo{View: "v1"}, want: "STALE"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := syncState(tc.a); got != tc.want {
				t.Errorf("syncState = %s, want %s", got, tc.want)
			}
		})
	}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good/a.yaml", "entries:\n- hostname: api.corp.example\n  addresses: [10.0.0.1]\n")
	write("good/.hidden.yaml", "not: [valid\n") // skipped, as the control plane skips it
	write("good/notes.txt", "skipped too")
	none := write("none.yaml", "entries: []\n")
	empty := write("empty.yaml", "")
	badEntry := write("bad.yaml", "entries:\n- hostname: ok.example\n  addresses: [10.0.0.1]\n- hostname: web.example\n  addresses: [10.0.0.300]\n")
	twoFaults := write("two-faults.yaml", "entries:\n- hostname: -web.example\n  addresses: [10.0.0.300]\n")
	typo := write("typo.yaml", "entries:\n- hostname: a.example\n  adresses: [10.0.0.1]\n")
	tmpl := write("template.yaml", "image: registry.example/meshdns:v1\n")
	badTmpl := write("bad-template.yaml", "dnsPort: 15020\n")
	emptyDir := filepath.Join(dir, "emptydir")
	if err := os.Mkdir(emptyDir, 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string // lines, in order
	}{
		{name: "valid folder, file and template", args: []string{"--entries", filepath.Join(dir, "good"), "--entries", none, "--inject-template", tmpl}, code: 0,
			stdout: []string{"ok      " + good + " (1 entries, 0 zones)", "ok      " + none + " (0 entries, 0 zones)",
				"ok      " + tmpl + " (injection template, image registry.example/meshdns:v1)"}},
		{name: "empty file", args: []string{"--entries", empty}, code: 1,
			stdout: []string{"INVALID " + empty + `: file is empty (write "entries: []" for a file with no entries)`}},
		{name: "bad address names the entry", args: []string{"--entries", badEntry, "--quiet"}, code: 1,
			stdout: []string{"INVALID " + badEntry + `: entries[1] "web.example": address "10.0.0.300"`}},
		{name: "misspelt field", args: []string{"--entries", typo}, code: 1, stdout: []string{"INVALID " + typo + `: entries[0] "a.example": unknown field "adresses"`}},
		{name: "bad template", args: []string{"--inject-template", badTmpl}, code: 1, stdout: []string{"INVALID " + badTmpl + ": invalid template: dnsPort 15020, adminPort 15020 and probePort 15121 must differ"}},
		{name: "missing file", args: []string{"--entries", filepath.Join(dir, "nope.yaml")}, code: 1, stdout: []string{"INVALID " + filepath.Join(dir, "nope.yaml") + ": no such file or directory"}},
		{name: "folder without entries files", args: []string{"--entries", emptyDir}, code: 1, stdout: []string{"INVALID " + emptyDir + ": folder holds no"}},
		{name: "nothing to validate", args: nil, code: 2},
		{name: "several paths after one flag", args: []string{"--entries", none, badEntry, "--quiet", filepath.Join(dir, "good")}, code: 1,
			stdout: []string{"INVALID " + badEntry + `: entries[1] "web.example": address "10.0.0.300"`}},
		{name: "paths without the flag, and after --", args: []string{none, "--inject-template", tmpl, "--", filepath.Join(dir, "good")}, code: 0,
			stdout: []string{"ok      " + none + " (0 entries, 0 zones)", "ok      " + good + " (1 entries, 0 zones)",
				"ok      " + tmpl + " (injection template, image registry.example/meshdns:v1)"}},
		{name: "every fault of one entry", args: []string{"--entries", twoFaults}, code: 1,
			stdout: []string{"INVALID " + twoFaults + `: entries[0] "-web.example": hostname: `, "INVALID " + twoFaults + `: entries[0] "-web.example": address "10.0.0.300"`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.Run(context.Background(), append([]string{"validate"}, tc.args...), &stdout, &stderr)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stdout %q stderr %q", code, tc.code, stdout.String(), stderr.String())
			}
			got := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
			if len(tc.stdout) == 0 {
				return
			}
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

func TestControlPlanePreflight(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "entries.yaml")
	tests := []struct {
		name    string
		cfg     controlplane.Config
		wantErr string
	}{
		{name: "existing folder", cfg: controlplane.Config{Entries: []string{"../../examples/entries"}}},
		{name: "missing file", cfg: controlplane.Config{Entries: []string{missing}}, wantErr: "--entries " + missing + ": no such file or directory"},
		// The last good version in the state serves while the file is gone.
		{name: "missing file with a state", cfg: controlplane.Config{Entries: []string{missing}, StateDir: dir}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := controlPlanePreflight(tc.cfg, &webhookFlags{})
			if (err == nil) != (tc.wantErr == "") || err != nil && err.Error() != tc.wantErr {
				t.Errorf("err = %v, want %q", err, tc.wantErr)
			}
		})
	}
}
