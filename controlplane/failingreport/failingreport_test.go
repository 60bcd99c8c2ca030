package failingreport

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/auth"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

func TestFill(t *testing.T) {
	on := &meshdnsv1.FailingReport{Enabled: true, TopN: 5, WindowSeconds: 30}
	queryLog := &meshdnsv1.QueryLog{Classes: []string{"nxdomain"}}
	for _, tc := range []struct {
		name     string
		mode     Mode
		optedIn  []string
		id       auth.Identity
		features []string
		before   func(*meshdnsv1.AgentSettings)
		want     *meshdnsv1.AgentSettings
	}{
		{name: "off", mode: Off, id: auth.Identity{Namespace: "a"}, features: []string{agentsettings.FeatureFailingReport},
			want: &meshdnsv1.AgentSettings{}},
		{name: "all", mode: All, id: auth.Identity{Namespace: "a"}, features: []string{agentsettings.FeatureFailingReport},
			want: &meshdnsv1.AgentSettings{Telemetry: &meshdnsv1.Telemetry{FailingReport: on},
				Requires: []string{agentsettings.FeatureFailingReport}}},
		{name: "opted-in namespace", mode: Namespaces, optedIn: []string{"a"}, id: auth.Identity{Namespace: "a", Pod: "web-0"},
			features: []string{agentsettings.FeatureFailingReport},
			want: &meshdnsv1.AgentSettings{Telemetry: &meshdnsv1.Telemetry{FailingReport: on},
				Requires: []string{agentsettings.FeatureFailingReport}}},
		{name: "other namespace", mode: Namespaces, optedIn: []string{"a"}, id: auth.Identity{Namespace: "b"},
			features: []string{agentsettings.FeatureFailingReport}, want: &meshdnsv1.AgentSettings{}},
		{name: "an agent without the feature is sent nothing", mode: All, id: auth.Identity{Namespace: "a"},
			want: &meshdnsv1.AgentSettings{}},
		{name: "the query log of another part stays", mode: All, id: auth.Identity{Namespace: "a"},
			features: []string{agentsettings.FeatureFailingReport, agentsettings.FeatureQueryLog},
			before:   func(s *meshdnsv1.AgentSettings) { s.Telemetry = &meshdnsv1.Telemetry{QueryLog: queryLog} },
			want: &meshdnsv1.AgentSettings{Telemetry: &meshdnsv1.Telemetry{QueryLog: queryLog, FailingReport: on},
				Requires: []string{agentsettings.FeatureFailingReport, agentsettings.FeatureQueryLog}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &Part{cfg: Config{Mode: tc.mode, TopN: 5, Window: 30 * time.Second}, ns: map[string]struct{}{}}
			for _, ns := range tc.optedIn {
				p.ns[ns] = struct{}{}
			}
			parts := []agentsettings.Part{p}
			if tc.before != nil {
				parts = append([]agentsettings.Part{agentsettings.Func(func(_ auth.Identity, s *meshdnsv1.AgentSettings) { tc.before(s) })}, parts...)
			}
			got := agentsettings.Compose(parts...).For(tc.id, tc.features)
			if diff := cmp.Diff(tc.want, got.Msg, protocmp.Transform()); diff != "" {
				t.Errorf("settings (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{name: "default off", cfg: Config{}, ok: true},
		{name: "all", cfg: Config{Mode: All, Window: time.Minute}, ok: true},
		{name: "namespaces without Kubernetes", cfg: Config{Mode: Namespaces}},
		{name: "unknown mode", cfg: Config{Mode: "some"}},
		{name: "window not in seconds", cfg: Config{Mode: All, Window: 1500 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := New(tc.cfg)
			if (err == nil) != tc.ok {
				t.Errorf("New: %v, want ok %v", err, tc.ok)
			}
		})
	}
}
