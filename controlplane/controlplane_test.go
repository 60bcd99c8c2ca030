package controlplane_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"

	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/internal/readmetest"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv(benchServerEnv); dir != "" {
		runBenchServer(dir)
	}
	if spec := os.Getenv(benchFleetEnv); spec != "" {
		runBenchFleet(spec)
	}
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("google.golang.org/grpc/internal/grpcsync.(*CallbackSerializer).run"))
}

type running struct {
	grpc, admin string
	cp          *controlplane.ControlPlane
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func start(t *testing.T, cfg controlplane.Config) *running {
	t.Helper()
	gl, al := listen(t), listen(t)
	cfg.GRPCListener, cfg.AdminListener = gl, al
	cfg.Debounce = 10 * time.Millisecond
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	cp, err := controlplane.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := cp.Run(ctx); err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return &running{grpc: gl.Addr().String(), admin: "http://" + al.Addr().String(), cp: cp}
}

func TestLogLevelEndpoint(t *testing.T) {
	level := new(slog.LevelVar)
	r := start(t, controlplane.Config{Entries: []string{t.TempDir()}, Level: level})
	tests := []struct {
		name   string
		method string
		query  string
		code   int
		body   string
		want   slog.Level
	}{
		{name: "show", method: "GET", code: 200, body: "info\n", want: slog.LevelInfo},
		{name: "set debug", method: "PUT", query: "?level=debug", code: 200, body: "debug\n", want: slog.LevelDebug},
		{name: "bad level", method: "PUT", query: "?level=loud", code: 400, want: slog.LevelDebug},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := testenv.HTTP(t, tc.method, r.admin+"/debug/loglevel"+tc.query, "", nil, "")
			if code != tc.code || (tc.body != "" && body != tc.body) {
				t.Errorf("got %d %q, want %d %q", code, body, tc.code, tc.body)
			}
			if level.Level() != tc.want {
				t.Errorf("level = %v, want %v", level.Level(), tc.want)
			}
		})
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// TestEndToEnd runs the control plane as the command does, with an entries
// folder, and drives it through real gRPC and HTTP on loopback.
func TestEndToEnd(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "entries.yaml")
	testenv.ReplaceFile(t, file, `
zones: [corp.example]
entries:
  - {hostname: api.corp.example, addresses: [10.1.2.3]}
  - {hostname: secret.corp.example, addresses: [10.1.2.4], namespaces: [team-a]}
  - {hostname: vip.corp.example, ports: [{name: http, port: 80}]}
`)
	r := start(t, controlplane.Config{Entries: []string{dir}})
	waitFor(t, "ready", func() bool { code, _ := get(t, r.admin+"/healthz/ready"); return code == 200 })

	a := cptest.Dial(t, r.grpc, cptest.DialOpts{Namespace: "team-a", Pod: "pod-a"})
	b := cptest.Dial(t, r.grpc, cptest.DialOpts{Namespace: "team-b", Pod: "pod-b"})
	a.Next()
	b.Next()
	if _, ok := a.Table["secret.corp.example"]; !ok {
		t.Error("team-a lacks secret.corp.example")
	}
	if _, ok := b.Table["secret.corp.example"]; ok {
		t.Error("team-b sees secret.corp.example")
	}
	vip := a.Table["vip.corp.example"].GetIps()
	if len(vip) != 2 || !strings.HasPrefix(vip[0], "240.240.") || !strings.HasPrefix(vip[1], "fd00:240:240:") {
		t.Errorf("vip.corp.example ips = %v, want one from each default pool", vip)
	}

	t.Run("admin", func(t *testing.T) {
		tests := []struct {
			name     string
			path     string
			code     int
			contains string
			absent   string
		}{
			{name: "agent view", path: "/debug/nametable?agent=team-a/pod-a", code: 200, contains: `"secret.corp.example"`},
			{name: "scoped agent view", path: "/debug/nametable?agent=team-b/pod-b", code: 200, contains: `"api.corp.example"`, absent: "secret"},
			{name: "namespace view", path: "/debug/nametable?namespace=team-b", code: 200, contains: `"authoritativeZones"`},
			{name: "unknown agent", path: "/debug/nametable?agent=team-c/x", code: 404},
			{name: "bad agent", path: "/debug/nametable?agent=nopod", code: 400},
			{name: "agents", path: "/debug/agents", code: 200, contains: `"pod": "pod-b"`},
			{name: "metrics", path: "/metrics", code: 200, contains: "meshdns_controlplane_agents_connected 2"},
			{name: "fixed log level", path: "/debug/loglevel", code: 501},
			{name: "heap profile", path: "/debug/pprof/heap?debug=1", code: 200, contains: "heap profile"},
		}
		for _, tc := range tests {
			t.Run(tc.name, func(t *testing.T) {
				code, body := get(t, r.admin+tc.path)
				if code != tc.code {
					t.Fatalf("code %d, want %d: %s", code, tc.code, body)
				}
				if !strings.Contains(body, tc.contains) {
					t.Errorf("body lacks %q:\n%s", tc.contains, body)
				}
				if tc.absent != "" && strings.Contains(body, tc.absent) {
					t.Errorf("body has %q:\n%s", tc.absent, body)
				}
			})
		}
		_, body := get(t, r.admin+"/debug/agents")
		var agents []server.AgentInfo
		if err := json.Unmarshal([]byte(body), &agents); err != nil {
			t.Fatal(err)
		}
		var pods []string
		for _, ag := range agents {
			pods = append(pods, ag.Namespace+"/"+ag.Pod)
			if ag.Sent != ag.View {
				t.Errorf("%s: sent %s, view %s", ag.Pod, ag.Sent, ag.View)
			}
		}
		if diff := cmp.Diff([]string{"team-a/pod-a", "team-b/pod-b"}, pods); diff != "" {
			t.Errorf("agents (-want +got):\n%s", diff)
		}
	})

	t.Run("file change reaches the agents as a delta", func(t *testing.T) {
		testenv.ReplaceFile(t, file, `
zones: [corp.example]
entries:
  - {hostname: api.corp.example, addresses: [10.1.2.30]}
  - {hostname: secret.corp.example, addresses: [10.1.2.4], namespaces: [team-a]}
  - {hostname: vip.corp.example, ports: [{name: http, port: 80}]}
`)
		for _, ag := range []*cptest.Agent{a, b} {
			resp := ag.Next()
			if got := cptest.Kind(resp); got != "delta" || len(resp.GetDelta().GetUpserted()) != 1 {
				t.Errorf("got %s with %d upserted, want a delta of 1", got, len(resp.GetDelta().GetUpserted()))
			}
			if got := ag.IPs()["api.corp.example"]; got != "10.1.2.30" {
				t.Errorf("api.corp.example = %s", got)
			}
		}
		// Both ACKs feed the DNS programming latency (file change -> agent).
		waitFor(t, "programming latency samples", func() bool {
			_, body := get(t, r.admin+"/metrics")
			return strings.Contains(body, "meshdns_controlplane_dns_programming_duration_seconds_count 2")
		})
	})

	t.Run("bad file keeps the last good table", func(t *testing.T) {
		testenv.ReplaceFile(t, file, "entries: [{hostname: api.corp.example, addresses: [not-an-ip]}]")
		waitFor(t, "reload error metric", func() bool {
			_, body := get(t, r.admin+"/metrics")
			return strings.Contains(body, "meshdns_controlplane_file_reload_errors_total 1")
		})
		a.None(200 * time.Millisecond)
		if got := a.IPs()["api.corp.example"]; got != "10.1.2.30" {
			t.Errorf("api.corp.example = %s", got)
		}
	})
}

// TestREADMEMetrics checks that the README's Metrics section lists exactly
// the metrics the control plane registers.
func TestREADMEMetrics(t *testing.T) {
	r := start(t, controlplane.Config{Entries: []string{t.TempDir()}})
	waitFor(t, "ready", func() bool { code, _ := get(t, r.admin+"/healthz/ready"); return code == 200 })
	_, body := get(t, r.admin+"/metrics")
	name := regexp.MustCompile(`(?m)^# TYPE (meshdns_\w+) `)
	var registered []string
	for _, m := range name.FindAllStringSubmatch(body, -1) {
		registered = append(registered, m[1])
	}
	readmetest.MetricsDocumented(t, "README.md", regexp.MustCompile("`(meshdns_\\w+)"), registered)
	for _, n := range registered {
		if !regexp.MustCompile(`^meshdns_controlplane_[a-z_]+$`).MatchString(n) {
			t.Errorf("metric %s does not follow meshdns_<subsystem>_<name>", n)
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testenv.Eventually(t, what, 5*time.Second, cond)
}

// TestResumeOnAnotherReplica: versions are content hashes, so an agent
// failing over to a second replica that serves the same entries resumes
// with an empty delta, or a delta when it is behind, instead of a full
// table.
func TestResumeOnAnotherReplica(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "entries.yaml")
	testenv.ReplaceFile(t, file, "entries: [{hostname: a.corp.example, addresses: [10.0.0.1]}, {hostname: b.corp.example}]")
	r1 := start(t, controlplane.Config{Entries: []string{dir}})
	r2 := start(t, controlplane.Config{Entries: []string{dir}})

	a := cptest.Dial(t, r1.grpc, cptest.DialOpts{Namespace: "ns", Pod: "p"})
	a.Next()
	v1 := a.Version
	a.Close()

	b := cptest.Dial(t, r2.grpc, cptest.DialOpts{Namespace: "ns", Pod: "p", Resume: v1})
	resp := b.Recv()
	if got := cptest.Kind(resp); got != "delta" || len(resp.GetDelta().GetUpserted())+len(resp.GetDelta().GetRemoved()) != 0 {
		t.Fatalf("resume on replica 2 got %s %v, want an empty delta", got, resp.GetDelta())
	}
	if resp.GetVersionInfo() != v1 {
		t.Errorf("replica 2 version %s, replica 1 %s", resp.GetVersionInfo(), v1)
	}
	b.Close()

	// Both replicas see the change; an agent still at v1 resumes on
	// replica 1 with a one-name delta.
	testenv.ReplaceFile(t, file, "entries: [{hostname: a.corp.example, addresses: [10.0.0.2]}, {hostname: b.corp.example}]")
	c := cptest.Dial(t, r2.grpc, cptest.DialOpts{Namespace: "ns", Pod: "q"})
	waitFor(t, "replica 2 has the change", func() bool {
		_, body := get(t, r2.admin+"/debug/nametable?namespace=ns")
		return strings.Contains(body, "10.0.0.2")
	})
	c.Close()
	d := cptest.Dial(t, r1.grpc, cptest.DialOpts{Namespace: "ns", Pod: "p", Resume: v1})
	waitFor(t, "replica 1 has the change", func() bool {
		_, body := get(t, r1.admin+"/debug/nametable?namespace=ns")
		return strings.Contains(body, "10.0.0.2")
	})
	// The first response may predate replica 1's reload; apply until the
	// agent holds the new address, counting full tables.
	d.Version = v1
	d.Table = map[string]*meshdnsv1.NameInfo{}
	for range 2 {
		resp := d.Recv()
		if got := cptest.Kind(resp); got != "delta" {
			t.Fatalf("got %s, want deltas only", got)
		}
		if err := d.Apply(resp); err != nil {
			t.Fatal(err)
		}
		d.Ack(resp)
		if _, ok := d.Table["a.corp.example"]; ok {
			break
		}
	}
	if got := d.IPs()["a.corp.example"]; got != "10.0.0.2" {
		t.Errorf("a.corp.example = %q", got)
	}
}
