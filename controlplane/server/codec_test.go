package server

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/view"
	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// prepared is a view's encoded response, as view.Prepared holds it.
func prepared(tb testing.TB, r *meshdnsv1.StreamNameTableResponse, base string) *view.Prepared {
	tb.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(r)
	if err != nil {
		tb.Fatal(err)
	}
	kind := "full"
	if r.GetDelta() != nil {
		kind = "delta"
	}
	return &view.Prepared{Version: &view.Version{ID: r.GetVersionInfo()}, Kind: kind, Base: base, Bytes: b}
}

func table(n int) map[string]*meshdnsv1.NameInfo {
	t := make(map[string]*meshdnsv1.NameInfo, n)
	for i := range n {
		t[fmt.Sprintf("svc%d.corp.example", i)] = &meshdnsv1.NameInfo{Ips: []string{fmt.Sprintf("10.0.%d.%d", i>>8&255, i&255)}}
	}
	return t
}

func zoneSettings(zone string) agentsettings.Agent {
	return agentsettings.Compose(agentsettings.Func(func(_ auth.Identity, s *meshdnsv1.AgentSettings) { s.PodZone = zone })).
		For(auth.Identity{}, []string{agentsettings.FeaturePodZone})
}

// wire concatenates what the codec hands gRPC.
func wire(tb testing.TB, e *encoded) []byte {
	tb.Helper()
	bufs, err := newCodec().Marshal(e)
	if err != nil {
		tb.Fatal(err)
	}
	var b []byte
	for _, x := range bufs {
		b = append(b, x.ReadOnlyData()...)
	}
	if len(b) != e.size {
		tb.Errorf("size %d, wire %d bytes", e.size, len(b))
	}
	return b
}

// topFields counts the response's top-level fields by number: the agent
// reads a repeated table or delta field as replacing the first, so each
// must appear once.
func topFields(tb testing.TB, b []byte) map[protowire.Number]int {
	tb.Helper()
	n := map[protowire.Number]int{}
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if l < 0 {
			tb.Fatal(protowire.ParseError(l))
		}
		b = b[l:]
		l = protowire.ConsumeFieldValue(num, typ, b)
		if l < 0 {
			tb.Fatal(protowire.ParseError(l))
		}
		b = b[l:]
		n[num]++
	}
	return n
}

func TestEncodeSettings(t *testing.T) {
	z := zoneSettings("zone-a")
	full := prepared(t, &meshdnsv1.StreamNameTableResponse{VersionInfo: "v2",
		Update: &meshdnsv1.StreamNameTableResponse_Full{Full: &meshdnsv1.NameTable{Table: table(3), AuthoritativeZones: []string{"corp.example"}}}}, "")
	delta := prepared(t, &meshdnsv1.StreamNameTableResponse{VersionInfo: "v2",
		Update: &meshdnsv1.StreamNameTableResponse_Delta{Delta: &meshdnsv1.NameTableDelta{BaseVersion: "v1", Removed: []string{"x.corp.example"}}}}, "v1")
	tests := []struct {
		name     string
		p        *view.Prepared
		settings agentsettings.Agent
		held     string
		want     *meshdnsv1.StreamNameTableResponse
	}{
		{name: "full, no settings", p: full, want: &meshdnsv1.StreamNameTableResponse{VersionInfo: "v2", Nonce: "7",
			Update: &meshdnsv1.StreamNameTableResponse_Full{Full: &meshdnsv1.NameTable{Table: table(3), AuthoritativeZones: []string{"corp.example"}}}}},
		{name: "full with settings", p: full, settings: z, want: &meshdnsv1.StreamNameTableResponse{VersionInfo: "v2+" + z.Version, Nonce: "7",
			Update: &meshdnsv1.StreamNameTableResponse_Full{Full: &meshdnsv1.NameTable{Table: table(3), AuthoritativeZones: []string{"corp.example"}, Settings: z.Msg}}}},
		{name: "delta, settings held", p: delta, settings: z, held: z.Version, want: &meshdnsv1.StreamNameTableResponse{VersionInfo: "v2+" + z.Version, Nonce: "7",
			Update: &meshdnsv1.StreamNameTableResponse_Delta{Delta: &meshdnsv1.NameTableDelta{BaseVersion: "v1+" + z.Version, Removed: []string{"x.corp.example"}}}}},
		{name: "delta, new settings", p: delta, settings: z, want: &meshdnsv1.StreamNameTableResponse{VersionInfo: "v2+" + z.Version, Nonce: "7",
			Update: &meshdnsv1.StreamNameTableResponse_Delta{Delta: &meshdnsv1.NameTableDelta{BaseVersion: "v1", Removed: []string{"x.corp.example"}, Settings: z.Msg}}}},
		{name: "delta, settings emptied", p: delta, settings: zoneSettings(""), held: z.Version, want: &meshdnsv1.StreamNameTableResponse{VersionInfo: "v2", Nonce: "7",
			Update: &meshdnsv1.StreamNameTableResponse_Delta{Delta: &meshdnsv1.NameTableDelta{BaseVersion: "v1+" + z.Version, Removed: []string{"x.corp.example"},
				Settings: &meshdnsv1.AgentSettings{}}}}},
	}
	s := &Server{m: &metrics{settingsSent: prometheus.NewCounter(prometheus.CounterOpts{Name: "sent"})}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.settings.Msg == nil {
				tc.settings = zoneSettings("")
			}
			shared := string(tc.p.Bytes)
			e, err := s.encode(tc.p, 7, tc.settings, tc.held)
			if err != nil {
				t.Fatal(err)
			}
			b := wire(t, e)
			var got meshdnsv1.StreamNameTableResponse
			if err := proto.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, &got, protocmp.Transform()); diff != "" {
				t.Errorf("response (-want +got):\n%s", diff)
			}
			update := protowire.Number(namewire.FieldResponseFull)
			if tc.p.Kind == "delta" {
				update = namewire.FieldResponseDelta
			}
			if diff := cmp.Diff(map[protowire.Number]int{namewire.FieldResponseVersion: 1, namewire.FieldResponseNonce: 1, update: 1}, topFields(t, b)); diff != "" {
				t.Errorf("top-level fields (-want +got):\n%s", diff)
			}
			// The agent's own decoders: settings strictly, a delta whole.
			if d := got.GetDelta(); d != nil {
				raw, _ := proto.Marshal(d)
				wd, err := namewire.UnmarshalDelta(raw)
				if err != nil {
					t.Fatal(err)
				}
				if wd.BaseVersion != d.GetBaseVersion() {
					t.Errorf("agent's base %q, want %q", wd.BaseVersion, d.GetBaseVersion())
				}
			}
			if string(tc.p.Bytes) != shared {
				t.Error("the view's shared bytes were modified")
			}
		})
	}
}

// BenchmarkEncode is the per-agent cost of a response: the view's shared
// bytes with the nonce (shared), or with the agent's version, delta base
// and settings (settings), for a one-name delta and a 10,000-name table.
func BenchmarkEncode(b *testing.B) {
	z := zoneSettings("zone-a")
	s := &Server{m: &metrics{settingsSent: prometheus.NewCounter(prometheus.CounterOpts{Name: "sent"})}}
	for _, p := range []*view.Prepared{
		prepared(b, &meshdnsv1.StreamNameTableResponse{VersionInfo: "0123456789abcdef",
			Update: &meshdnsv1.StreamNameTableResponse_Delta{Delta: &meshdnsv1.NameTableDelta{BaseVersion: "fedcba9876543210", Upserted: table(1)}}}, "fedcba9876543210"),
		prepared(b, &meshdnsv1.StreamNameTableResponse{VersionInfo: "0123456789abcdef",
			Update: &meshdnsv1.StreamNameTableResponse_Full{Full: &meshdnsv1.NameTable{Table: table(10000)}}}, ""),
	} {
		b.Run(p.Kind+"/shared", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e := newEncoded(p, 12345)
				if _, err := (codec{}).Marshal(e); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(p.Kind+"/settings held", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e, err := s.encode(p, 12345, z, z.Version)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := (codec{}).Marshal(e); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(p.Kind+"/settings sent", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				e, err := s.encode(p, 12345, z, "")
				if err != nil {
					b.Fatal(err)
				}
				if _, err := (codec{}).Marshal(e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestEncodeSharesPolicy: a policy's encoding is sent from where the
// agent's settings keep it (shared by the agents of that policy), not
// copied per response.
func TestEncodeSharesPolicy(t *testing.T) {
	pol := &meshdnsv1.DNSPolicy{Source: "team/deny", Rules: []*meshdnsv1.PolicyRule{
		{Pattern: "blocked.example.net.", Action: meshdnsv1.PolicyAction_POLICY_ACTION_DENY}}}
	st := agentsettings.Compose(agentsettings.Func(func(_ auth.Identity, s *meshdnsv1.AgentSettings) { s.Policy = pol; s.PodZone = "zone-a" })).
		For(auth.Identity{}, []string{agentsettings.FeaturePodZone})
	delta := prepared(t, &meshdnsv1.StreamNameTableResponse{VersionInfo: "v2",
		Update: &meshdnsv1.StreamNameTableResponse_Delta{Delta: &meshdnsv1.NameTableDelta{BaseVersion: "v1"}}}, "v1")
	s := &Server{m: &metrics{settingsSent: prometheus.NewCounter(prometheus.CounterOpts{Name: "sent"})}}
	e, err := s.encode(delta, 3, st, "")
	if err != nil {
		t.Fatal(err)
	}
	shared, _ := st.Encoding()
	bufs, _ := newCodec().Marshal(e)
	found := false
	for _, x := range bufs {
		if d := x.ReadOnlyData(); len(d) > 0 && &d[0] == &shared[0] {
			found = true
		}
	}
	if !found {
		t.Error("the policy's bytes were copied into the response")
	}
	var got meshdnsv1.StreamNameTableResponse
	if err := proto.Unmarshal(wire(t, e), &got); err != nil {
		t.Fatal(err)
	}
	want := &meshdnsv1.StreamNameTableResponse{VersionInfo: "v2+" + st.Version, Nonce: "3",
		Update: &meshdnsv1.StreamNameTableResponse_Delta{Delta: &meshdnsv1.NameTableDelta{BaseVersion: "v1", Settings: st.Msg}}}
	if diff := cmp.Diff(want, &got, protocmp.Transform()); diff != "" {
		t.Errorf("response (-want +got):\n%s", diff)
	}
	raw, _ := proto.Marshal(got.GetDelta())
	if _, err := namewire.UnmarshalDelta(raw); err != nil {
		t.Errorf("the agent's decoder refuses the delta: %v", err)
	}
}
