package stream

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/meshdns/meshdns/controlplane"
	"github.com/meshdns/meshdns/controlplane/forwardsource"
)

// TestForwardingRules: a rules file read by the control plane sends
// corp.example to a second upstream for the agents of one namespace only,
// over the real stream; editing the file away sends it back.
func TestForwardingRules(t *testing.T) {
	def, corp := startUpstream(t), startUpstream(t)
	dir := t.TempDir()
	writeFile(t, dir, "entries.yaml", entries("corp.internal", "db.corp.internal 10.9.0.1"))
	rulesDir := t.TempDir()
	rules := filepath.Join(rulesDir, "forwarding.yaml")
	writeFile(t, rulesDir, "forwarding.yaml", "rules:\n- name: corp\n  namespaces: [team-a]\n  domains: [corp.example]\n  upstreams: ["+corp.addr+"]\n")
	f, err := forwardsource.NewFile(forwardsource.FileConfig{Path: rules, Interval: 50 * time.Millisecond, Logger: logger()})
	if err != nil {
		t.Fatal(err)
	}
	cp := startControlPlaneWith(t, dir, "", func(c *controlplane.Config) { c.SettingsParts = append(c.SettingsParts, f) })

	a := startAgent(t, agentOptions{namespace: "team-a", controlPlanes: []string{cp.grpc}, upstream: def.addr})
	b := startAgent(t, agentOptions{namespace: "team-b", controlPlanes: []string{cp.grpc}, upstream: def.addr})
	a.await(t, "db.corp.internal", "NOERROR A 10.9.0.1")
	b.await(t, "db.corp.internal", "NOERROR A 10.9.0.1")

	a.answerA(t, "x.corp.example")
	b.answerA(t, "y.corp.example")
	if corp.asked("x.corp.example") != 1 || def.asked("x.corp.example") != 0 {
		t.Errorf("team-a x.corp.example: corp asked %d, default %d; want 1 and 0", corp.asked("x.corp.example"), def.asked("x.corp.example"))
	}
	if corp.asked("y.corp.example") != 0 || def.asked("y.corp.example") != 1 {
		t.Errorf("team-b y.corp.example: corp asked %d, default %d; want 0 and 1", corp.asked("y.corp.example"), def.asked("y.corp.example"))
	}

	// The rule goes: team-a's corp names go to the default upstream.
	writeFile(t, rulesDir, "forwarding.yaml", "rules: []\n")
	poll(t, func() bool {
		a.answerA(t, "z.corp.example")
		return def.asked("z.corp.example") > 0
	}, func() string { return "team-a's corp.example still forwarded to the rule's upstream" })
}
