package stream

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/server"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// denyPart is a settings part that gives the agents of one namespace a
// policy denying one outside name; the test moves it.
type denyPart struct {
	agentsettings.Notifier
	mu        sync.Mutex
	namespace string // guarded by mu
}

func (p *denyPart) Fill(id auth.Identity, s *meshdnsv1.AgentSettings) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if id.Namespace != p.namespace {
		return
	}
	s.Policy = &meshdnsv1.DNSPolicy{Source: id.Namespace + "/deny", Rules: []*meshdnsv1.PolicyRule{
		{Pattern: "blocked.example.net.", Action: meshdnsv1.PolicyAction_POLICY_ACTION_DENY, Source: id.Namespace + "/deny"},
	}}
}

func (p *denyPart) move(ns string) {
	p.mu.Lock()
	p.namespace = ns
	p.mu.Unlock()
	p.Notify()
}

// agents reads the control plane's /debug/agents.
func (c *controlPlane) agents(t testing.TB) map[string]server.AgentInfo {
	t.Helper()
	code, body := get(t, c.admin+"/debug/agents")
	if code != http.StatusOK {
		t.Fatalf("/debug/agents: %d %s", code, body)
	}
	var list []server.AgentInfo
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatalf("/debug/agents: %v", err)
	}
	out := map[string]server.AgentInfo{}
	for _, a := range list {
		out[a.Namespace] = a
	}
	return out
}

// TestPerAgentSettings: real agents of two namespaces streaming from one
// control plane get their own settings (a DNS policy for one of them)
// beside the shared entries, apply them (the denied name never reaches the
// upstream), ACK versions that name view and settings, and follow a
// change that moves the policy to the other agent; a restarted agent
// resumes from its persisted version without a full table.
func TestPerAgentSettings(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "names.yaml", entries(zone, "open.corp.example 10.5.0.1"))
	up := startUpstream(t)
	part := &denyPart{namespace: "team-a"}
	cp := startControlPlaneWith(t, dir, "", func(c *controlplane.Config) { c.SettingsParts = []agentsettings.Part{part} })
	stateA := t.TempDir()
	agents := map[string]*testAgent{
		"team-a": startAgent(t, agentOptions{namespace: "team-a", controlPlanes: []string{cp.grpc}, upstream: up.addr, stateDir: stateA}),
		"team-b": startAgent(t, agentOptions{namespace: "team-b", controlPlanes: []string{cp.grpc}, upstream: up.addr}),
	}
	// synced waits until every agent ACKed what it should hold, and
	// returns what the control plane says about them.
	synced := func() map[string]server.AgentInfo {
		t.Helper()
		var got map[string]server.AgentInfo
		poll(t, func() bool {
			got = cp.agents(t)
			return len(got) == 2 && got["team-a"].Acked == got["team-a"].View && got["team-b"].Acked == got["team-b"].View
		}, func() string { b, _ := json.Marshal(got); return "agents not in sync: " + string(b) })
		return got
	}
	// check asks each agent once, after both ACKed their settings: the
	// denied name never reaches the upstream from the agent with the
	// policy.
	check := func(denied, allowed string) map[string]server.AgentInfo {
		t.Helper()
		infos := synced()
		before := up.asked("blocked.example.net")
		if got := agents[denied].answerA(t, "blocked.example.net"); got != "NXDOMAIN" {
			t.Errorf("%s: blocked.example.net A = %q, want NXDOMAIN", denied, got)
		}
		if got := agents[allowed].answerA(t, "blocked.example.net"); got != "NOERROR A "+upstreamIP {
			t.Errorf("%s: blocked.example.net A = %q, want the upstream's answer", allowed, got)
		}
		if n := up.asked("blocked.example.net") - before; n != 1 {
			t.Errorf("upstream asked %d times for blocked.example.net, want 1 (only %s's)", n, allowed)
		}
		for _, a := range agents {
			if got := a.answerA(t, "open.corp.example"); got != "NOERROR A 10.5.0.1" {
				t.Errorf("open.corp.example A = %q", got)
			}
		}
		return infos
	}

	infos := check("team-a", "team-b")
	a, b := infos["team-a"], infos["team-b"]
	viewID, settingsID, _ := strings.Cut(a.Acked, "+")
	if a.Settings == nil || a.Settings.Policy != "team-a/deny" || settingsID != a.Settings.Version || b.Settings != nil {
		t.Fatalf("agents %+v / %+v: want team-a with policy team-a/deny, team-b without settings", a, b)
	}
	if b.Acked != viewID {
		t.Errorf("team-b acked %q, want the plain view version %q", b.Acked, viewID)
	}
	if n := cp.metric(t, "meshdns_controlplane_nacks_total"); n != 0 {
		t.Errorf("%v NACKs, want 0", n)
	}

	// The policy moves: each agent gets a delta with its new settings.
	fulls := cp.metric(t, "meshdns_controlplane_pushes_total", `kind="full"`)
	part.move("team-b")
	poll(t, func() bool { as := cp.agents(t); return as["team-b"].Settings != nil && as["team-a"].Settings == nil },
		func() string { return "the policy has not moved to team-b" })
	infos = check("team-b", "team-a")
	if infos["team-a"].Acked != viewID || infos["team-b"].Settings == nil || infos["team-b"].Settings.Policy != "team-b/deny" {
		t.Errorf("after the move: %+v / %+v", infos["team-a"], infos["team-b"])
	}
	if got := cp.metric(t, "meshdns_controlplane_pushes_total", `kind="full"`); got != fulls {
		t.Errorf("full tables %v -> %v: a settings change must go out as a delta", fulls, got)
	}

	// team-a restarts from its state dir and resumes with an empty delta.
	agents["team-a"].stop()
	fulls = cp.metric(t, "meshdns_controlplane_pushes_total", `kind="full"`)
	agents["team-a"] = startAgent(t, agentOptions{namespace: "team-a", controlPlanes: []string{cp.grpc}, upstream: up.addr, stateDir: stateA})
	check("team-b", "team-a")
	if got := cp.metric(t, "meshdns_controlplane_pushes_total", `kind="full"`); got != fulls {
		t.Errorf("full tables %v -> %v: a resuming agent gets a delta", fulls, got)
	}
}
