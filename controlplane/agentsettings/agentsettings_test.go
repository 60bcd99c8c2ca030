package agentsettings

import (
	"context"
	"sync"
	"testing"
	"unsafe"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/meshdns/meshdns/controlplane/auth"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var all = []string{FeaturePolicy, FeatureForwarding, FeatureQueryLog, FeatureFailingReport, FeaturePodZone}

func zone(z string) Part {
	return Func(func(_ auth.Identity, s *meshdnsv1.AgentSettings) { s.PodZone = z })
}

func policy(src string) Part {
	return Func(func(id auth.Identity, s *meshdnsv1.AgentSettings) {
		if id.Pod == "web-0" {
			s.Policy = &meshdnsv1.DNSPolicy{Source: src, OutsideDefault: meshdnsv1.PolicyAction_POLICY_ACTION_DENY}
		}
	})
}

func telemetry(_ auth.Identity, s *meshdnsv1.AgentSettings) {
	s.Telemetry = &meshdnsv1.Telemetry{
		QueryLog:      &meshdnsv1.QueryLog{Classes: []string{"denied"}},
		FailingReport: &meshdnsv1.FailingReport{Enabled: true},
	}
}

func TestFor(t *testing.T) {
	web := auth.Identity{Namespace: "ns-a", Pod: "web-0"}
	db := auth.Identity{Namespace: "ns-a", Pod: "db-0"}
	tests := []struct {
		name     string
		parts    []Part
		id       auth.Identity
		features []string
		want     *meshdnsv1.AgentSettings
	}{
		{name: "no parts", id: web, features: all, want: &meshdnsv1.AgentSettings{}},
		{name: "zone", parts: []Part{zone("z1")}, id: web, features: all,
			want: &meshdnsv1.AgentSettings{PodZone: "z1", Requires: []string{FeaturePodZone}}},
		{name: "zone dropped for an agent without the feature", parts: []Part{zone("z1")}, id: web,
			features: []string{FeaturePolicy}, want: &meshdnsv1.AgentSettings{}},
		{name: "policy sent and required without the feature", parts: []Part{policy("ns-a/p")}, id: web,
			want: &meshdnsv1.AgentSettings{Policy: &meshdnsv1.DNSPolicy{Source: "ns-a/p", OutsideDefault: meshdnsv1.PolicyAction_POLICY_ACTION_DENY},
				Requires: []string{FeaturePolicy}}},
		{name: "policy selects one pod", parts: []Part{policy("ns-a/p"), zone("z1")}, id: db, features: all,
			want: &meshdnsv1.AgentSettings{PodZone: "z1", Requires: []string{FeaturePodZone}}},
		{name: "telemetry", parts: []Part{Func(telemetry)}, id: web, features: all,
			want: &meshdnsv1.AgentSettings{Telemetry: &meshdnsv1.Telemetry{
				QueryLog: &meshdnsv1.QueryLog{Classes: []string{"denied"}}, FailingReport: &meshdnsv1.FailingReport{Enabled: true}},
				Requires: []string{FeatureFailingReport, FeatureQueryLog}}},
		{name: "telemetry in part", parts: []Part{Func(telemetry)}, id: web, features: []string{FeatureQueryLog},
			want: &meshdnsv1.AgentSettings{Telemetry: &meshdnsv1.Telemetry{QueryLog: &meshdnsv1.QueryLog{Classes: []string{"denied"}}},
				Requires: []string{FeatureQueryLog}}},
		{name: "telemetry none", parts: []Part{Func(telemetry)}, id: web, want: &meshdnsv1.AgentSettings{}},
		{name: "forwarding and a part's own requirement", id: web, parts: []Part{Func(func(_ auth.Identity, s *meshdnsv1.AgentSettings) {
			s.Forwarding = []*meshdnsv1.ForwardRule{{Domains: []string{"corp.example."}, Upstreams: []string{"10.0.0.1"}}}
			s.Requires = []string{"zz-future", FeatureForwarding}
		})}, want: &meshdnsv1.AgentSettings{
			Forwarding: []*meshdnsv1.ForwardRule{{Domains: []string{"corp.example."}, Upstreams: []string{"10.0.0.1"}}},
			Requires:   []string{FeatureForwarding, "zz-future"}}},
		{name: "a later part overwrites", parts: []Part{zone("z1"), zone("z2")}, id: web, features: all,
			want: &meshdnsv1.AgentSettings{PodZone: "z2", Requires: []string{FeaturePodZone}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := Compose(tc.parts...).For(tc.id, tc.features)
			if diff := cmp.Diff(tc.want, got.Msg, protocmp.Transform()); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
			var decoded meshdnsv1.AgentSettings
			if err := proto.Unmarshal(got.AppendEncoding(nil), &decoded); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, &decoded, protocmp.Transform()); diff != "" {
				t.Errorf("encoded settings (-want +got):\n%s", diff)
			}
			if got.Empty() != (got.Version == "") || got.Empty() != proto.Equal(tc.want, &meshdnsv1.AgentSettings{}) {
				t.Errorf("Empty() = %v with version %q for %v", got.Empty(), got.Version, tc.want)
			}
		})
	}
}

func TestVersion(t *testing.T) {
	id := auth.Identity{Namespace: "ns-a", Pod: "web-0"}
	v := func(parts ...Part) string { return Compose(parts...).For(id, all).Version }
	if a, b := v(zone("z1"), policy("ns-a/p")), v(policy("ns-a/p"), zone("z1")); a != b || len(a) != 16 {
		t.Errorf("same content, versions %q and %q, want equal, 16 hex digits", a, b)
	}
	seen := map[string]string{}
	for name, parts := range map[string][]Part{
		"none": nil, "z1": {zone("z1")}, "z2": {zone("z2")}, "policy": {policy("ns-a/p")},
		"policy other source": {policy("ns-a/q")}, "both": {zone("z1"), policy("ns-a/p")},
	} {
		ver := v(parts...)
		if other, ok := seen[ver]; ok {
			t.Errorf("%s and %s share version %q", name, other, ver)
		}
		seen[ver] = name
	}
}

func TestChanged(t *testing.T) {
	var n1, n2 Notifier
	var mu sync.Mutex
	z := "z1"
	zonePart := notifying{func(_ auth.Identity, s *meshdnsv1.AgentSettings) { mu.Lock(); s.PodZone = z; mu.Unlock() }, &n1}
	other := notifying{func(auth.Identity, *meshdnsv1.AgentSettings) {}, &n2}
	s := Compose(zonePart, other, Func(telemetry))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- s.Run(ctx) }()
	defer func() { cancel(); <-done }()

	id := auth.Identity{Namespace: "ns-a", Pod: "web-0"}
	for i, n := range []*Notifier{&n1, &n2, &n1, &n1} {
		ch := s.Changed()
		before := s.For(id, all).Version
		mu.Lock()
		z = string(rune('a' + i))
		mu.Unlock()
		n.Notify()
		<-ch // the test's failure is a hang, reported by go test's timeout
		if after := s.For(id, all).Version; after == before {
			t.Errorf("change %d: version %q unchanged", i, after)
		}
	}
}

// notifying is a part filled by a function that announces changes through
// a Notifier.
type notifying struct {
	fill func(auth.Identity, *meshdnsv1.AgentSettings)
	*Notifier
}

func (p notifying) Fill(id auth.Identity, s *meshdnsv1.AgentSettings) { p.fill(id, s) }

// syncing is a part that runs and becomes ready when its test says so.
type syncing struct {
	Func
	ready chan struct{}
}

func (p syncing) Ready() <-chan struct{}        { return p.ready }
func (p syncing) Run(ctx context.Context) error { <-ctx.Done(); return nil }

func TestWaitAndRunners(t *testing.T) {
	p := syncing{Func: func(auth.Identity, *meshdnsv1.AgentSettings) {}, ready: make(chan struct{})}
	s := Compose(zone("z1"), p)
	if got := len(s.Runners()); got != 1 {
		t.Errorf("runners %d, want 1", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := s.Wait(ctx); err == nil {
		t.Error("Wait returned nil before the part was ready")
	}
	close(p.ready)
	if err := s.Wait(context.Background()); err != nil {
		t.Errorf("Wait: %v", err)
	}
}

// TestSharedPolicy: agents of one policy object share its encoding (a
// thousand rules are not copied per agent), and equal content has an
// equal version whatever the object (replicas build their own).
func TestSharedPolicy(t *testing.T) {
	p1, p2 := bigPolicy(100), bigPolicy(100)
	var use *meshdnsv1.DNSPolicy
	s := Compose(Func(func(_ auth.Identity, st *meshdnsv1.AgentSettings) { st.Policy = use }), policy("ns-a/other"))
	use = p1
	a, b := s.For(auth.Identity{Pod: "a"}, all), s.For(auth.Identity{Pod: "b"}, all)
	if a.Version != b.Version || unsafe.SliceData(a.shared) != unsafe.SliceData(b.shared) {
		t.Errorf("two agents of one policy: versions %q %q, shared encodings %p %p; want equal, one copy",
			a.Version, b.Version, unsafe.SliceData(a.shared), unsafe.SliceData(b.shared))
	}
	use = p2
	if c := s.For(auth.Identity{Pod: "a"}, all); c.Version != a.Version {
		t.Errorf("an equal policy object: version %q, want %q", c.Version, a.Version)
	}
	web := s.For(auth.Identity{Pod: "web-0"}, all) // the second part replaces the policy
	if web.Version == a.Version || web.Msg.GetPolicy().GetSource() != "ns-a/other" {
		t.Errorf("web-0: version %q policy %v", web.Version, web.Msg.GetPolicy())
	}
	var decoded meshdnsv1.AgentSettings
	if err := proto.Unmarshal(a.AppendEncoding(nil), &decoded); err != nil || !proto.Equal(&decoded, a.Msg) {
		t.Errorf("encoding decodes to %v (%v), want %v", &decoded, err, a.Msg)
	}
}
