package agent

import (
	"encoding/json"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/miekg/dns"

	"github.com/meshdns/meshdns/agent/discovery/discoverytest"
	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

func rule(pattern string, action meshdnsv1.PolicyAction) *meshdnsv1.PolicyRule {
	return &meshdnsv1.PolicyRule{Pattern: pattern, Action: action, Source: "demo/egress"}
}

const (
	allow = meshdnsv1.PolicyAction_POLICY_ACTION_ALLOW
	deny  = meshdnsv1.PolicyAction_POLICY_ACTION_DENY
)

// A policy streamed with a version is enforced with its names, survives a
// restart from the state dir before any control plane answers, and a
// version whose policy cannot be enforced is NACKed with the last good
// version (names and policy) kept.
func TestControlPlanePolicy(t *testing.T) {
	up := startNamesUpstream(t)
	cp := discoverytest.Start(t, "127.0.0.1:0", nil)
	state := t.TempDir()
	a := startAgent(t, Config{ControlPlanes: []string{cp.Addr}, StateDir: state, Upstreams: []string{up.addr}, PodName: "web-0"})
	if f := cp.Recv(t).GetIdentity().GetFeatures(); !slices.Contains(f, "policy") {
		t.Errorf("identity features %q lack policy", f)
	}
	type result struct {
		Rcode  string
		Answer []string
		Asked  bool
	}
	check := func(t *testing.T, dnsAddr string, want map[string]result) {
		t.Helper()
		got := map[string]result{}
		for name := range want {
			m := exchange(t, "udp", dnsAddr, name, dns.TypeA)
			got[name] = result{dns.RcodeToString[m.Rcode], answerData(m), up.asked(dns.Fqdn(name))}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("(-want +got)\n%s", diff)
		}
	}

	// v1: stripe's API only. The table name resolves (table default).
	v1 := cpTable(map[string]string{"a.demo.svc.cluster.local": "10.1.0.1"})
	v1.Settings = &meshdnsv1.AgentSettings{Requires: []string{"policy"}, Policy: &meshdnsv1.DNSPolicy{
		Rules:          []*meshdnsv1.PolicyRule{rule("api.stripe.com", allow)},
		OutsideDefault: deny,
	}}
	cp.Send(discoverytest.Full("v1", "n1", v1))
	if ack := cp.Recv(t); ack.GetVersionInfo() != "v1" || ack.GetErrorDetail() != nil {
		t.Fatalf("ack = %v", ack)
	}
	check(t, a.dns, map[string]result{
		"a.demo.svc.cluster.local": {"NOERROR", []string{"a.demo.svc.cluster.local. A 10.1.0.1"}, false},
		"api.stripe.com":           {"NOERROR", []string{"api.stripe.com. A 192.0.2.1"}, true},
		"b.s3.amazonaws.com":       {"NXDOMAIN", nil, false},
	})

	// v2, a delta: a new name and a wider policy, applied together.
	d2 := discoverytest.Delta("v2", "n2", "v1", map[string]*meshdnsv1.NameInfo{
		"b.demo.svc.cluster.local": {Ips: []string{"10.1.0.2"}},
	})
	d2.GetDelta().Settings = &meshdnsv1.AgentSettings{Requires: []string{"policy"}, Policy: &meshdnsv1.DNSPolicy{
		Rules: []*meshdnsv1.PolicyRule{
			rule("api.stripe.com", allow), rule("*.s3.amazonaws.com", allow),
			rule("a.demo.svc.cluster.local", deny),
		},
		OutsideDefault: deny,
		DenyResponse:   meshdnsv1.DenyResponse_DENY_RESPONSE_REFUSED,
	}}
	cp.Send(d2)
	if ack := cp.Recv(t); ack.GetVersionInfo() != "v2" || ack.GetErrorDetail() != nil {
		t.Fatalf("ack = %v", ack)
	}
	v2want := map[string]result{
		// Under a search domain a denial is NXDOMAIN whatever the
		// policy's response, so musl's walk goes on.
		"a.demo.svc.cluster.local": {"NXDOMAIN", nil, false},
		"b.demo.svc.cluster.local": {"NOERROR", []string{"b.demo.svc.cluster.local. A 10.1.0.2"}, false},
		"b.s3.amazonaws.com":       {"NOERROR", []string{"b.s3.amazonaws.com. A 192.0.2.1"}, true},
		"www.stripe.com":           {"REFUSED", nil, false},
	}
	check(t, a.dns, v2want)

	// v3 carries a rule the agent cannot enforce: NACKed, v2 kept.
	d3 := discoverytest.Delta("v3", "n3", "v2", map[string]*meshdnsv1.NameInfo{
		"c.demo.svc.cluster.local": {Ips: []string{"10.1.0.3"}},
	})
	d3.GetDelta().Settings = &meshdnsv1.AgentSettings{Requires: []string{"policy"}, Policy: &meshdnsv1.DNSPolicy{
		Rules: []*meshdnsv1.PolicyRule{rule("www.stripe.com", allow), rule("bad..name", allow)},
	}}
	cp.Send(d3)
	nack := cp.Recv(t)
	if e := nack.GetErrorDetail(); nack.GetVersionInfo() != "v2" || e.GetCode() != 3 || !strings.Contains(e.GetMessage(), "bad..name") {
		t.Fatalf("nack = %v, want InvalidArgument naming the rule, keeping v2", nack)
	}
	v2want["c.demo.svc.cluster.local"] = result{"NXDOMAIN", nil, false}
	check(t, a.dns, v2want)

	// /debug/lookup names the rule that decided.
	_, body := httpGet(t, a.admin+"/debug/lookup?name=www.stripe.com")
	var rep struct {
		Rcode  string
		Policy *struct{ Action, Mode, Rule, Source, Default string }
	}
	if err := json.Unmarshal([]byte(body), &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Rcode != "REFUSED" || rep.Policy == nil || rep.Policy.Action != "deny" || rep.Policy.Default != "outside_default" {
		t.Errorf("/debug/lookup = %s", body)
	}
	a.stop()

	// Restart with the control plane gone: v2's names and policy serve
	// from the state dir at once.
	cp.Stop()
	b := startAgent(t, Config{ControlPlanes: []string{cp.Addr}, StateDir: state, Upstreams: []string{up.addr}})
	delete(v2want, "c.demo.svc.cluster.local")
	v2want["evil.example"] = result{"REFUSED", nil, false}
	check(t, b.dns, v2want)
	if cur := b.run.tables.Current(); cur == nil || cur.Version != "v2" || cur.AgentSettings().Policy == nil {
		t.Errorf("restored %+v, want v2 with its policy", cur)
	}
}

// convertPolicy rejects what it cannot enforce exactly, naming it.
func TestConvertPolicy(t *testing.T) {
	cases := []struct {
		name    string
		p       *namewire.DNSPolicy
		wantErr string
	}{
		{name: "none", p: nil},
		{name: "defaults", p: &namewire.DNSPolicy{}},
		{name: "rules", p: &namewire.DNSPolicy{Rules: []namewire.PolicyRule{{Pattern: "*.Example.COM.", Action: namewire.PolicyActionDeny}}}},
		{name: "rule without action", p: &namewire.DNSPolicy{Rules: []namewire.PolicyRule{{Pattern: "a.example"}}}, wantErr: `rule 0 ("a.example")`},
		{name: "bad pattern", p: &namewire.DNSPolicy{Rules: []namewire.PolicyRule{{Pattern: "a.*.example", Action: namewire.PolicyActionAllow}}}, wantErr: "a.*.example"},
		{name: "unknown mode", p: &namewire.DNSPolicy{Mode: 7}, wantErr: "mode 7"},
		{name: "unknown response", p: &namewire.DNSPolicy{DenyResponse: 9}, wantErr: "deny_response 9"},
		{name: "unknown default", p: &namewire.DNSPolicy{OutsideDefault: 5}, wantErr: "outside_default"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := convertPolicy(tc.p)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("error %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one naming %q", err, tc.wantErr)
			}
		})
	}
}

// A policy of 1,000 rules costs the agent its compiled form and the
// settings a version keeps: measured on the heap, bounded here, and
// reported with -v (go test -run TestPolicyMemory -v ./agent/).
func TestPolicyMemory(t *testing.T) {
	build := func() *namewire.AgentSettings {
		p := &namewire.DNSPolicy{OutsideDefault: namewire.PolicyActionDeny, Source: "shop/egress"}
		for i := range 1000 {
			pat := fmt.Sprintf("api%d.vendor%d.example.com", i, i%97)
			if i%2 == 1 {
				pat = fmt.Sprintf("*.bucket%d.example.org", i)
			}
			p.Rules = append(p.Rules, namewire.PolicyRule{Pattern: pat, Action: namewire.PolicyActionAllow, Source: "shop/egress"})
		}
		return &namewire.AgentSettings{Policy: p}
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	before := heap()
	s := build()
	settings := heap()
	p, err := convertPolicy(s.Policy)
	if err != nil {
		t.Fatal(err)
	}
	compiled := heap()
	runtime.KeepAlive(s)
	runtime.KeepAlive(p)
	kept, pol := int64(settings)-int64(before), int64(compiled)-int64(settings)
	t.Logf("1,000 rules: settings kept with the version %d KB, compiled policy %d KB, total %d KB", kept>>10, pol>>10, (kept+pol)>>10)
	if kept+pol > 1<<20 {
		t.Errorf("a policy of 1,000 rules costs %d KB, want under 1 MB", (kept+pol)>>10)
	}
}
