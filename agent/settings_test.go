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
	"github.com/meshdns/meshdns/pkg/policy"
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

// protoRules is manyRules as the control plane sends it.
func protoRules(n int) []*meshdnsv1.PolicyRule {
	out := make([]*meshdnsv1.PolicyRule, n)
	for i, r := range manyRules(n).Rules {
		out[i] = rule(r.Pattern, allow)
	}
	return out
}

// An agent enforces a policy at the limit and NACKs one over it, naming
// the limit, whatever its control plane sends (one older, or wrong):
// the last good version, names and policy, keeps serving. Applying the
// version at the limit is measured (allocations, an upper bound on its
// peak) and reported with -v.
func TestControlPlanePolicyLimit(t *testing.T) {
	up := startNamesUpstream(t)
	cp := discoverytest.Start(t, "127.0.0.1:0", nil)
	a := startAgent(t, Config{ControlPlanes: []string{cp.Addr}, StateDir: t.TempDir(), Upstreams: []string{up.addr}, PodName: "web-0"})
	cp.Recv(t) // the identity

	v1 := cpTable(map[string]string{"a.demo.svc.cluster.local": "10.1.0.1"})
	v1.Settings = &meshdnsv1.AgentSettings{Requires: []string{"policy"}, Policy: &meshdnsv1.DNSPolicy{
		Rules: protoRules(policy.MaxRules), OutsideDefault: deny, Source: "demo/egress"}}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	cp.Send(discoverytest.Full("v1", "n1", v1))
	if ack := cp.Recv(t); ack.GetVersionInfo() != "v1" || ack.GetErrorDetail() != nil {
		t.Fatalf("ack = %v", ack)
	}
	runtime.ReadMemStats(&after)
	t.Logf("applying a version with a policy of %d rules allocated %d KB", policy.MaxRules, (after.TotalAlloc-before.TotalAlloc)>>10)

	d2 := discoverytest.Delta("v2", "n2", "v1", map[string]*meshdnsv1.NameInfo{"b.demo.svc.cluster.local": {Ips: []string{"10.1.0.2"}}})
	d2.GetDelta().Settings = &meshdnsv1.AgentSettings{Requires: []string{"policy"}, Policy: &meshdnsv1.DNSPolicy{
		Rules: protoRules(policy.MaxRules + 1), Source: "demo/egress"}}
	cp.Send(d2)
	nack := cp.Recv(t)
	if e := nack.GetErrorDetail(); nack.GetVersionInfo() != "v1" || e.GetCode() != 3 ||
		!strings.Contains(e.GetMessage(), "policy has 10001 rules, more than the limit of 10000") {
		t.Fatalf("nack = %.300v, want InvalidArgument naming the limit, keeping v1", nack)
	}
	for name, want := range map[string]string{
		"a.demo.svc.cluster.local": "NOERROR",  // v1's name
		"b.demo.svc.cluster.local": "NXDOMAIN", // v2's, refused with it
		"api0.vendor0.example.com": "NOERROR",  // allowed by v1's policy
		"www.stripe.com":           "NXDOMAIN", // denied by v1's policy
	} {
		if m := exchange(t, "udp", a.dns, name, dns.TypeA); dns.RcodeToString[m.Rcode] != want {
			t.Errorf("%s: %s, want %s", name, dns.RcodeToString[m.Rcode], want)
		}
	}
	if cur := a.run.tables.Current(); cur == nil || cur.Version != "v1" || len(cur.AgentSettings().Policy.Rules) != policy.MaxRules {
		t.Errorf("serving %+v, want v1 and its policy", cur)
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
		{name: "rules at the limit", p: manyRules(policy.MaxRules)},
		{name: "rules over the limit", p: manyRules(policy.MaxRules + 1), wantErr: "policy has 10001 rules, more than the limit of 10000"},
		{name: "pattern over the limit", p: &namewire.DNSPolicy{Rules: []namewire.PolicyRule{{Pattern: strings.Repeat("a.", 128) + "com", Action: namewire.PolicyActionAllow}}},
			wantErr: "pattern of 259 characters, more than the limit of 254"},
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

// manyRules is a policy of n allow rules, half exact names and half
// wildcards, of the lengths real policies have (20-30 characters).
func manyRules(n int) *namewire.DNSPolicy {
	return rulesOf(n, func(i int) string {
		if i%2 == 1 {
			return fmt.Sprintf("*.bucket%d.example.org", i)
		}
		return fmt.Sprintf("api%d.vendor%d.example.com", i, i%97)
	})
}

// longestRules is a policy of n rules whose patterns are as long as a
// pattern may be (policy.MaxPatternLength): the most memory n rules take.
func longestRules(n int) *namewire.DNSPolicy {
	pad := strings.Repeat(strings.Repeat("x", 63)+".", 3) // 192 characters
	return rulesOf(n, func(i int) string {
		name := fmt.Sprintf("%s%08d", pad, i)
		return name + strings.Repeat("y", policy.MaxPatternLength-1-len(name)) + "."
	})
}

func rulesOf(n int, pattern func(i int) string) *namewire.DNSPolicy {
	p := &namewire.DNSPolicy{OutsideDefault: namewire.PolicyActionDeny, Source: "shop/egress", Rules: make([]namewire.PolicyRule, n)}
	for i := range n {
		p.Rules[i] = namewire.PolicyRule{Pattern: pattern(i), Action: namewire.PolicyActionAllow, Source: "shop/egress"}
	}
	return p
}

// A policy costs the agent its compiled form and the settings a version
// keeps: measured on the heap at 1,000 rules and at the limit
// (policy.MaxRules), with patterns of real lengths and of the longest
// length, bounded here, and reported with -v (go test -run
// TestPolicyMemory -v ./agent/; docs/policy.md, Cost).
func TestPolicyMemory(t *testing.T) {
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	for _, tc := range []struct {
		name  string
		build func(n int) *namewire.DNSPolicy
		rules int
		limit int64 // bytes per 1,000 rules, both parts
	}{
		{"real patterns", manyRules, 1000, 256 << 10},
		{"real patterns", manyRules, policy.MaxRules, 256 << 10},
		{"longest patterns", longestRules, policy.MaxRules, 1 << 20},
	} {
		t.Run(fmt.Sprintf("%s/%d", tc.name, tc.rules), func(t *testing.T) {
			before := heap()
			s := &namewire.AgentSettings{Policy: tc.build(tc.rules)}
			settings := heap()
			p, err := convertPolicy(s.Policy)
			if err != nil {
				t.Fatal(err)
			}
			compiled := heap()
			runtime.KeepAlive(s)
			runtime.KeepAlive(p)
			kept, pol := int64(settings)-int64(before), int64(compiled)-int64(settings)
			per := (kept + pol) * 1000 / int64(tc.rules)
			t.Logf("%d rules, %s: settings kept with the version %d KB, compiled policy %d KB, total %d KB, %d KB per 1,000 rules",
				tc.rules, tc.name, kept>>10, pol>>10, (kept+pol)>>10, per>>10)
			if per > tc.limit {
				t.Errorf("%d KB per 1,000 rules, want under %d KB", per>>10, tc.limit>>10)
			}
		})
	}
}
