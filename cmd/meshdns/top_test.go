package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane/admin"
	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// replica serves agents as a control plane's /debug/agents.
func replica(t *testing.T, agents ...server.AgentInfo) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/debug/agents" {
			http.NotFound(w, r)
			return
		}
		_ = json.NewEncoder(w).Encode(agents)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestTopMergesReplicas: top reads every replica given, keeps each pod's
// newest report (a pod that moved replicas), and filters by name.
func TestTopMergesReplicas(t *testing.T) {
	now := time.Now().UTC().Truncate(time.Second)
	nx := func(name string, count uint64) server.FailingName {
		return server.FailingName{Name: name, Rcode: "NXDOMAIN", Count: count}
	}
	report := func(at time.Time, names ...server.FailingName) *server.FailingReport {
		return &server.FailingReport{Received: at, WindowSeconds: 60, Names: names}
	}
	r1 := replica(t,
		server.AgentInfo{Namespace: "a", Pod: "web-0", Failing: report(now.Add(-2*time.Minute), nx("old.example.", 9))},
		server.AgentInfo{Namespace: "b", Pod: "db-0", Failing: report(now, nx("x.example.", 3), server.FailingName{Name: "y.example.", Rcode: "SERVFAIL", Count: 1})},
		server.AgentInfo{Namespace: "b", Pod: "db-1"}, // does not report
	)
	r2 := replica(t,
		server.AgentInfo{Namespace: "a", Pod: "web-0", Failing: report(now, nx("x.example.", 7))},
	)
	top := func(args ...string) (int, string, string) {
		var stdout, stderr bytes.Buffer
		code := cli.Run(context.Background(), append([]string{"top", "--admin-addr", r1 + "," + r2}, args...), &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}

	code, out, stderr := top("--output", "json")
	var got []admin.PodFailing
	if err := json.Unmarshal([]byte(out), &got); code != 0 || err != nil {
		t.Fatalf("top --output json: exit %d, %v, %q %q", code, err, out, stderr)
	}
	want := []admin.PodFailing{
		{Namespace: "a", Pod: "web-0", FailingReport: *report(now, nx("x.example.", 7))},
		{Namespace: "b", Pod: "db-0", FailingReport: *report(now, nx("x.example.", 3), server.FailingName{Name: "y.example.", Rcode: "SERVFAIL", Count: 1})},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("top json (-want +got):\n%s", diff)
	}

	code, out, _ = top("--name", "X.example")
	rows := regexp.MustCompile(`(?m)^(\S+)\s+(\S+)\s+NXDOMAIN\s+(\d+)\s+x\.example\.\s+1m0s\s`).FindAllStringSubmatch(out, -1)
	if code != 0 || len(rows) != 2 || rows[0][1] != "a" || rows[0][3] != "7" || rows[1][1] != "b" || rows[1][3] != "3" {
		t.Errorf("which pods fail for x.example.: exit %d\n%s", code, out)
	}
	if !strings.HasPrefix(out, "NAMESPACE  POD    RCODE") || strings.Contains(out, "y.example.") {
		t.Errorf("table:\n%s", out)
	}
	if code, out, _ = top("--namespace", "c"); code != 0 || !strings.HasPrefix(out, "no failing-names reports at") {
		t.Errorf("no reports: exit %d, %q", code, out)
	}
}

func TestTopErrors(t *testing.T) {
	closed := testenv.FreeAddr(t)
	ok := replica(t)
	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{name: "nothing listens", args: []string{"--admin-addr", closed}, code: 1, stderr: "nothing listens at http://" + closed + "/debug/agents"},
		{name: "one replica of two answers", args: []string{"--admin-addr", closed + "," + ok}, code: 0,
			stdout: "no failing-names reports", stderr: "warning: nothing listens at http://" + closed},
		{name: "bad rcode", args: []string{"--rcode", "NOERROR"}, code: 2, stderr: `--rcode "NOERROR": want NXDOMAIN, SERVFAIL or REFUSED`},
		{name: "bad output", args: []string{"--output", "yaml"}, code: 2, stderr: `--output "yaml": want table or json`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.Run(context.Background(), append([]string{"top"}, tc.args...), &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.stderr) || !strings.Contains(stdout.String(), tc.stdout) {
				t.Errorf("exit %d, stdout %q, stderr %q; want %d, %q and %q", code, stdout.String(), stderr.String(), tc.code, tc.stdout, tc.stderr)
			}
		})
	}
}
