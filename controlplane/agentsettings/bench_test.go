package agentsettings

import (
	"fmt"
	"testing"

	"github.com/meshdns/meshdns/controlplane/auth"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// bigPolicy is a policy of n rules, shared by every agent it selects (as
// policysource's merged policies are).
func bigPolicy(n int) *meshdnsv1.DNSPolicy {
	p := &meshdnsv1.DNSPolicy{Source: "team/egress", OutsideDefault: meshdnsv1.PolicyAction_POLICY_ACTION_DENY}
	for i := range n {
		p.Rules = append(p.Rules, &meshdnsv1.PolicyRule{Pattern: fmt.Sprintf("*.svc%d.example.com.", i),
			Action: meshdnsv1.PolicyAction_POLICY_ACTION_ALLOW, Source: "team/egress"})
	}
	return p
}

// BenchmarkFor is one agent's composition after a change: what each
// connected agent costs the control plane when a part changes.
func BenchmarkFor(b *testing.B) {
	for _, n := range []int{0, 10, 1000} {
		p := bigPolicy(n)
		s := Compose(zone("zone-a"), Func(func(_ auth.Identity, st *meshdnsv1.AgentSettings) {
			if n > 0 {
				st.Policy = p
			}
		}))
		id := auth.Identity{Namespace: "team", Pod: "web-0", Node: "node-1"}
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.For(id, all)
			}
		})
	}
	// The same agent when its policy object is new each time (a cache
	// miss: what the first agent of a changed policy pays).
	objs := make([]*meshdnsv1.DNSPolicy, 2*maxPolicyCache)
	for i := range objs {
		objs[i] = bigPolicy(1000)
	}
	i := 0
	s := Compose(Func(func(_ auth.Identity, st *meshdnsv1.AgentSettings) { st.Policy = objs[i%len(objs)]; i++ }))
	b.Run("rules=1000/new-object", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.For(auth.Identity{Namespace: "team", Pod: "web-0"}, all)
		}
	})
}
