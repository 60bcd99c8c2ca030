package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/meshdns/meshdns/cmd/internal/cli"
	"github.com/meshdns/meshdns/controlplane/admin"
	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/controlplane/view"
)

var quarantinedV2 = server.QuarantineInfo{ClusterDomain: "cluster.local", Version: "a042784bd7ecd3bf", Reports: 3, Threshold: 3,
	Quarantined: true, HeldAt: "777e18f805f9bb1b", Since: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC),
	Reason: "agent died running a042784bd7ecd3bf", LastAgent: "shop/web-2/"}

// quarantineAgents is a control plane's agent list with its quarantine.
type quarantineAgents struct{ q []server.QuarantineInfo }

func (quarantineAgents) Agents() []server.AgentInfo {
	return []server.AgentInfo{{Namespace: "shop", Pod: "web-0", Acked: "777e18f805f9bb1b", View: "a042784bd7ecd3bf"}}
}
func (quarantineAgents) AgentView(string, string) *view.View   { return nil }
func (a quarantineAgents) Quarantine() []server.QuarantineInfo { return a.q }

// adminServer serves the control plane's admin handler over agents.
func adminServer(t *testing.T, agents admin.Agents) string {
	t.Helper()
	views, err := view.New(view.Config{Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(admin.Config{Gatherer: prometheus.NewRegistry(), Agents: agents, Views: views})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestStatusShowsQuarantine(t *testing.T) {
	for _, tc := range []struct {
		name  string
		q     []server.QuarantineInfo
		lines []string // after the agents' table
	}{
		{name: "quarantined", q: []server.QuarantineInfo{quarantinedV2}, lines: []string{
			"",
			"VIEW                  VERSION           STATE        REPORTS  HELD AT           SINCE                 REASON",
			"shared/cluster.local  a042784bd7ecd3bf  QUARANTINED  3/3      777e18f805f9bb1b  2026-01-02T03:04:05Z  agent died running a042784bd7ecd3bf",
		}},
		{name: "nothing quarantined", lines: []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr := adminServer(t, quarantineAgents{q: tc.q})
			var stdout, stderr bytes.Buffer
			if code := cli.Run(context.Background(), []string{"status", "--admin-addr", addr}, &stdout, &stderr); code != 0 {
				t.Fatalf("status exited %d: %s", code, stderr.String())
			}
			lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
			if diff := cmp.Diff(tc.lines, lines[2:], cmp.Transformer("trim", strings.TrimSpace)); diff != "" {
				t.Errorf("status after the agents (-want +got):\n%s", diff)
			}
		})
	}
}

func TestStatusOfControlPlaneWithoutQuarantine(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/agents", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("[]")) })
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	var stdout bytes.Buffer
	if code := cli.Run(context.Background(), []string{"status", "--admin-addr", srv.URL}, &stdout, &stdout); code != 0 {
		t.Fatalf("status of an older control plane exited %d: %s", code, stdout.String())
	}
}

func TestCheckQuarantine(t *testing.T) {
	reported := quarantinedV2
	reported.Quarantined, reported.HeldAt, reported.Since, reported.Reports = false, "", time.Time{}, 2
	for _, tc := range []struct {
		name string
		q    []replicaQuarantine
		want []finding
	}{
		{name: "none"},
		{name: "quarantined", q: []replicaQuarantine{{pod: "cp-a", infos: []server.QuarantineInfo{quarantinedV2}}}, want: []finding{{
			Code: codeVersionQuarantined, Severity: severityError, Object: "Pod meshdns-system/cp-a",
			Message: "name table version a042784bd7ecd3bf of view shared/cluster.local is quarantined: 3 agents (threshold 3) crashed running it, last shop/web-2/: agent died running a042784bd7ecd3bf; the other agents get version 777e18f805f9bb1b meanwhile",
			Fix:     "find the source change (entries, Services, DNSPolicy) that made it and revert or fix it: the next version lifts the quarantine; meshdns status shows the agents",
		}}},
		{name: "reported below the threshold", q: []replicaQuarantine{{pod: "cp-b", infos: []server.QuarantineInfo{reported}}}, want: []finding{{
			Code: codeVersionQuarantined, Severity: severityWarning, Object: "Pod meshdns-system/cp-b",
			Message: "2 agents (threshold 3) crashed running name table version a042784bd7ecd3bf of view shared/cluster.local, last shop/web-2/: agent died running a042784bd7ecd3bf",
			Fix:     "read the agents' logs (previous container: kubectl logs -p) for why they died",
		}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := analyze(&cluster{system: "meshdns-system", quarantine: tc.q})
			var mine []finding
			for _, f := range got {
				if f.Code == codeVersionQuarantined {
					mine = append(mine, f)
				}
			}
			if diff := cmp.Diff(tc.want, mine); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
}
