package server_test

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"

	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/auth"
	"github.com/meshdns/meshdns/controlplane/internal/cptest"
	"github.com/meshdns/meshdns/controlplane/server"
	"github.com/meshdns/meshdns/internal/namewire"
	meshdnsv1 "github.com/meshdns/meshdns/proto/meshdns/v1"
)

// zones is a settings part: the zone of each pod, changed by the test.
type zones struct {
	agentsettings.Notifier
	mu     sync.Mutex
	byPod  map[string]string
	policy map[string]string // pod -> policy source, for a required setting
}

func (z *zones) Fill(id auth.Identity, s *meshdnsv1.AgentSettings) {
	z.mu.Lock()
	defer z.mu.Unlock()
	s.PodZone = z.byPod[id.Pod]
	if src, ok := z.policy[id.Pod]; ok {
		s.Policy = &meshdnsv1.DNSPolicy{Source: src}
	}
}

func (z *zones) set(pod, zone string) {
	z.mu.Lock()
	z.byPod[pod] = zone
	z.mu.Unlock()
	z.Notify()
}

// settingsOf checks that the agent's own strict decoder takes s and returns
// its zone.
func settingsOf(t *testing.T, s *meshdnsv1.AgentSettings) string {
	t.Helper()
	b, err := proto.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var w namewire.AgentSettings
	if err := w.Unmarshal(b); err != nil {
		t.Fatalf("the agent's decoder refuses the settings: %v", err)
	}
	return w.PodZone
}

func TestSettingsPerAgent(t *testing.T) {
	part := &zones{byPod: map[string]string{"web-0": "zone-a", "db-0": "zone-b"}}
	h := newHarness(t, harnessOpts{server: func(c *server.Config) { c.Settings = agentsettings.Compose(part) }})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	feat := []string{agentsettings.FeaturePodZone}
	web := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "team", Pod: "web-0", Features: feat})
	db := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "team", Pod: "db-0", Features: feat})
	old := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "team", Pod: "old-0"}) // no features
	for _, a := range []*cptest.Agent{web, db, old} {
		if r := a.Next(); cptest.Kind(r) != "full" {
			t.Fatalf("first response %s, want full", cptest.Kind(r))
		}
	}
	if got := []string{settingsOf(t, web.Settings), settingsOf(t, db.Settings)}; !cmp.Equal(got, []string{"zone-a", "zone-b"}) {
		t.Fatalf("zones %v, want [zone-a zone-b]", got)
	}
	if diff := cmp.Diff([]string{agentsettings.FeaturePodZone}, web.Settings.GetRequires()); diff != "" {
		t.Errorf("requires (-want +got):\n%s", diff)
	}
	if old.Settings != nil {
		t.Errorf("an agent without the pod-zone feature got settings %v", old.Settings)
	}
	viewID, _, _ := strings.Cut(web.Version, "+")
	if web.Version == db.Version || viewID == web.Version || old.Version != viewID || !strings.HasPrefix(db.Version, viewID+"+") {
		t.Fatalf("versions web %q db %q old %q: want one view version, and different settings versions after \"+\"", web.Version, db.Version, old.Version)
	}

	t.Run("a change for one agent reaches only it", func(t *testing.T) {
		before := db.Version
		part.set("db-0", "zone-c")
		r := db.Next()
		if cptest.Kind(r) != "delta" || len(r.GetDelta().GetUpserted())+len(r.GetDelta().GetRemoved()) != 0 {
			t.Fatalf("got %s %v, want a delta with no name changes", cptest.Kind(r), r)
		}
		if got := settingsOf(t, db.Settings); got != "zone-c" || db.Version == before || !strings.HasPrefix(db.Version, viewID+"+") {
			t.Fatalf("db-0 zone %q version %q, want zone-c and a new settings version of view %s", got, db.Version, viewID)
		}
		waitFor(t, "one agent's settings changed", func() bool { return h.metric(t, "meshdns_controlplane_settings_changes_total") == 1 })
		web.None(200 * time.Millisecond)
		old.None(0)
	})

	t.Run("a table change keeps the settings", func(t *testing.T) {
		h.publish(t, entry("a.corp.example", "10.0.0.2"))
		for _, a := range []*cptest.Agent{web, db, old} {
			r := a.Next()
			if cptest.Kind(r) != "delta" || r.GetDelta().Settings != nil {
				t.Fatalf("got %s with settings %v, want a delta without settings (absent keeps them)", cptest.Kind(r), r.GetDelta().GetSettings())
			}
		}
		newView, _, _ := strings.Cut(web.Version, "+")
		if newView == viewID || settingsOf(t, web.Settings) != "zone-a" || old.Version != newView {
			t.Errorf("after the change: web %q (zone %q), old %q", web.Version, settingsOf(t, web.Settings), old.Version)
		}
		viewID = newView
	})

	t.Run("reconnect with the version held", func(t *testing.T) {
		again := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "team", Pod: "db-0", Features: feat, Resume: db.Version})
		again.Settings = db.Settings
		r := again.Next()
		if cptest.Kind(r) != "delta" || r.GetDelta().GetBaseVersion() != db.Version || r.GetDelta().Settings != nil || r.GetVersionInfo() != db.Version {
			t.Fatalf("got %v, want an empty delta without settings, version %s", r, db.Version)
		}
		// Another agent of the pod with other settings held: the delta
		// carries the current ones.
		stale := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "team", Pod: "db-0", Features: feat, Resume: viewID + "+0123456789abcdef"})
		r = stale.Next()
		if cptest.Kind(r) != "delta" || settingsOf(t, r.GetDelta().GetSettings()) != "zone-c" || r.GetVersionInfo() != db.Version {
			t.Fatalf("got %v, want a delta with zone-c, version %s", r, db.Version)
		}
		again.Close()
		stale.Close()
	})

	t.Run("settings emptied", func(t *testing.T) {
		part.set("web-0", "")
		r := web.Next()
		if cptest.Kind(r) != "delta" || r.GetDelta().Settings == nil || proto.Size(r.GetDelta().Settings) != 0 {
			t.Fatalf("got %v, want a delta with present, empty settings", r)
		}
		if web.Version != viewID {
			t.Errorf("version %q, want the plain view version %q", web.Version, viewID)
		}
		db.None(100 * time.Millisecond)
	})
}

// TestRequiredSettingsNACKed: policy goes to every agent and is required;
// an agent that cannot enforce it NACKs and keeps its table, and is not
// sent the same settings again until its table moves on.
func TestRequiredSettingsNACKed(t *testing.T) {
	part := &zones{byPod: map[string]string{}, policy: map[string]string{"web-0": "team/lockdown"}}
	h := newHarness(t, harnessOpts{server: func(c *server.Config) { c.Settings = agentsettings.Compose(part) }})
	h.publish(t, entry("a.corp.example", "10.0.0.1"))
	a := cptest.Dial(t, h.addr, cptest.DialOpts{Namespace: "team", Pod: "web-0"})
	r := a.Recv()
	if diff := cmp.Diff([]string{agentsettings.FeaturePolicy}, r.GetFull().GetSettings().GetRequires()); diff != "" {
		t.Fatalf("requires (-want +got):\n%s", diff)
	}
	a.Nack(r, "settings require features this agent does not implement: policy")
	waitFor(t, "the NACK counted", func() bool { return h.metric(t, "meshdns_controlplane_nacks_total") == 1 })
	a.None(200 * time.Millisecond)
	infos := h.srv.Agents()
	if len(infos) != 1 || infos[0].Settings == nil || infos[0].Settings.Policy != "team/lockdown" || infos[0].Nacks != 1 {
		t.Fatalf("agents %+v, want one with policy team/lockdown and a NACK", infos)
	}
	if got := h.metric(t, "meshdns_controlplane_settings_sent_total"); got != 1 {
		t.Errorf("settings sent %v times, want 1", got)
	}
}
