package monitoring_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"sigs.k8s.io/yaml"

	"github.com/meshdns/meshdns/agent"
	"github.com/meshdns/meshdns/controlplane"
	meshmetrics "github.com/meshdns/meshdns/internal/metrics"
	"github.com/meshdns/meshdns/internal/testkit/testenv"
)

// TestRealPrometheus runs a real Prometheus (Debian's, beside promtool)
// on loopback, scraping a real control plane and an agent streaming its
// table from it, with the shipped rules loaded. The targets carry the
// labels the ServiceMonitor and the PodMonitor give them (job, namespace,
// pod, container). It checks that every dashboard query and every rule
// evaluates without error on real data, that the dashboard's main panels
// have data, that a healthy install raises no alert, and that stopping
// the control plane raises MeshDNSControlPlaneDown and
// MeshDNSAgentDisconnected (pending: their for: is minutes).
func TestRealPrometheus(t *testing.T) {
	promBin := testenv.RequireTool(t, "prometheus")
	quiet := slog.New(slog.DiscardHandler)

	entries := t.TempDir()
	if err := os.WriteFile(filepath.Join(entries, "entries.yaml"), []byte("entries: [{hostname: api.corp.example, addresses: [10.1.2.3]}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	grpcLis, adminLis, cpProbeLis := listen(t), listen(t), listen(t)
	cp, err := controlplane.New(controlplane.Config{
		Entries: []string{entries}, Debounce: 10 * time.Millisecond, Logger: quiet,
		GRPCListener: grpcLis, AdminListener: adminLis, ProbeListener: cpProbeLis,
	})
	if err != nil {
		t.Fatal(err)
	}
	cpCtx, stopCP := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := cp.Run(cpCtx); err != nil {
			t.Errorf("control plane: %v", err)
		}
	}()
	t.Cleanup(func() { stopCP(); wg.Wait() })

	// The collectors cmd/meshdns adds to the agent's registry.
	reg := meshmetrics.NewRegistry()
	reg.MustRegister(meshmetrics.GoCollector{}, meshmetrics.ProcessCollector{})
	a, err := agent.New(agent.Config{
		Registry:  reg,
		Namespace: "demo", PodName: "web-1", ControlPlanes: []string{grpcLis.Addr().String()},
		ResolvConf: "../resolv.conf", Upstreams: []string{closedAddr(t)},
		DNSAddrs: []string{"127.0.0.1:0"}, AdminAddr: "-", ProbeAddr: "127.0.0.1:0", Logger: quiet,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Listen(); err != nil {
		t.Fatal(err)
	}
	agentCtx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan error, 1)
	go func() { agentDone <- a.Run(agentCtx) }()
	t.Cleanup(func() {
		stopAgent()
		if err := <-agentDone; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	testenv.Eventually(t, "agent ready", time.Minute, a.Ready)
	for _, q := range []struct {
		name  string
		rcode int
	}{{"api.corp.example.", dns.RcodeSuccess}, {"example.org.", dns.RcodeServerFailure}} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, dns.TypeA)
		r, _, err := (&dns.Client{Timeout: 30 * time.Second}).Exchange(m, a.DNSAddr().String())
		if err != nil || r.Rcode != q.rcode {
			t.Fatalf("%s: %v %v, want rcode %d", q.name, r, err, q.rcode)
		}
	}

	prom := startPrometheus(t, promBin, cpProbeLis.Addr().String(), a.ProbeAddr().String())

	// Two scrapes of each target, so rates have two samples.
	testenv.Eventually(t, "both targets scraped twice", 2*time.Minute, func() bool {
		return len(prom.query(t, `count_over_time(up[1m]) >= 2`)) == 2
	})
	testenv.Eventually(t, "every rule evaluated on the scraped data", 2*time.Minute, func() bool {
		for _, r := range prom.rules(t) {
			if r.LastEvaluation.Before(prom.scraped) {
				return false
			}
		}
		return true
	})
	for _, r := range prom.rules(t) {
		if r.Health != "ok" {
			t.Errorf("rule %s: health %s: %s", r.Name, r.Health, r.LastError)
		}
	}
	if alerts := prom.alerts(t); len(alerts) > 0 {
		t.Errorf("a healthy install raises %v", alerts)
	}

	// Every dashboard query evaluates; the panels a running install always
	// fills have data.
	mustHaveData := map[string]bool{
		"Agents connected": true, "Agents ready": true, "Agents not ready": true, "Names served": true,
		"Queries by source": true, "Queries by rcode": true, "Table entries": true, "Agent memory": true,
		"Agents per replica": true, "Control plane memory": true, "Pushes and NACKs": true,
	}
	seen := map[string]bool{}
	for where, expr := range queries(t) {
		title, ok := strings.CutPrefix(where, "panel ")
		if !ok {
			continue
		}
		title = title[:strings.LastIndexByte(title, ' ')]
		expr = strings.NewReplacer(`$namespace`, `.*`, `$__rate_interval`, `1m`).Replace(expr)
		if len(prom.query(t, expr)) > 0 {
			seen[title] = true
		}
	}
	for title := range mustHaveData {
		if !seen[title] {
			t.Errorf("panel %q has no data from a running install", title)
		}
	}

	// The control plane goes away: its target is down and the agent loses
	// its stream.
	stopCP()
	testenv.Eventually(t, "MeshDNSControlPlaneDown and MeshDNSAgentDisconnected pending", 2*time.Minute, func() bool {
		got := prom.alerts(t)
		return got["MeshDNSControlPlaneDown"] != "" && got["MeshDNSAgentDisconnected"] != ""
	})
}

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// promServer is a running Prometheus server's HTTP API.
type promServer struct {
	api     string
	scraped time.Time // after which every target has been scraped at least once
}

// startPrometheus runs Prometheus with the shipped rules, scraping the
// control plane and the agent every second as the monitors would (their
// job and target labels), and stops it at cleanup.
func startPrometheus(t *testing.T, bin, cpAddr, agentAddr string) *promServer {
	t.Helper()
	dir := t.TempDir()
	rules, err := yaml.Marshal(ruleGroups(t))
	if err != nil {
		t.Fatal(err)
	}
	config := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [rules.yaml]
scrape_configs:
  - job_name: meshdns-controlplane
    static_configs: [{targets: [%q], labels: {namespace: meshdns-system, pod: meshdns-controlplane-a, container: controlplane, service: meshdns-controlplane}}]
  - job_name: meshdns-system/meshdns-agents
    static_configs: [{targets: [%q], labels: {namespace: demo, pod: web-1, container: meshdns-agent}}]
`, cpAddr, agentAddr)
	for name, data := range map[string][]byte{"rules.yaml": rules, "prometheus.yml": []byte(config)} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	addr := testenv.FreeAddr(t)
	var logs testenv.Buffer
	cmd := exec.Command(bin, "--config.file="+filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		if t.Failed() {
			t.Logf("prometheus:\n%s", logs.String())
		}
	})
	p := &promServer{api: "http://" + addr + "/api/v1/"}
	testenv.Eventually(t, "prometheus ready", time.Minute, func() bool {
		select {
		case <-exited:
			t.Fatalf("prometheus exited:\n%s", logs.String())
		default:
		}
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	testenv.Eventually(t, "both targets up", time.Minute, func() bool {
		return len(p.query(t, `up == 1`)) == 2
	})
	p.scraped = time.Now()
	return p
}

// get calls the API and decodes its data into out, failing on an error
// status (a query Prometheus cannot evaluate).
func (p *promServer) get(t *testing.T, path string, out any) {
	t.Helper()
	resp, err := http.Get(p.api + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var env struct {
		Status string          `json:"status"`
		Error  string          `json:"error"`
		Data   json.RawMessage `json:"data"`
	}
	if err := json.Unmarshal(body, &env); err != nil || env.Status != "success" {
		t.Fatalf("GET %s: %s %v %s", path, env.Error, err, body)
	}
	if err := json.Unmarshal(env.Data, out); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// query evaluates an instant query and returns its series.
func (p *promServer) query(t *testing.T, expr string) []json.RawMessage {
	t.Helper()
	var data struct {
		Result []json.RawMessage `json:"result"`
	}
	p.get(t, "query?query="+url.QueryEscape(expr), &data)
	return data.Result
}

type ruleState struct {
	Name           string    `json:"name"`
	Health         string    `json:"health"`
	LastError      string    `json:"lastError"`
	LastEvaluation time.Time `json:"lastEvaluation"`
}

func (p *promServer) rules(t *testing.T) []ruleState {
	t.Helper()
	var data struct {
		Groups []struct {
			Rules []ruleState `json:"rules"`
		} `json:"groups"`
	}
	p.get(t, "rules", &data)
	var out []ruleState
	for _, g := range data.Groups {
		out = append(out, g.Rules...)
	}
	if len(out) != len(alerts(t)) {
		t.Fatalf("prometheus loaded %d rules, the file has %d", len(out), len(alerts(t)))
	}
	return out
}

// alerts returns the pending or firing alerts: name -> state.
func (p *promServer) alerts(t *testing.T) map[string]string {
	t.Helper()
	var data struct {
		Alerts []struct {
			Labels map[string]string `json:"labels"`
			State  string            `json:"state"`
		} `json:"alerts"`
	}
	p.get(t, "alerts", &data)
	out := map[string]string{}
	for _, a := range data.Alerts {
		out[a.Labels["alertname"]] = a.State
	}
	return out
}
