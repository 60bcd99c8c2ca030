package ingest

import (
	"errors"
	"testing"

	"github.com/meshdns/meshdns/internal/namewire"
)

// Each version becomes served once: Publish gets it whole (its table with
// its settings converted), the settings converted once per version and
// not again for a version that carries the same ones; tables between two
// versions go to Swap; settings that do not convert reject the version
// before anything is swapped.
func TestServedOncePerVersion(t *testing.T) {
	converted := 0
	errBad := errors.New("bad settings")
	w := newSettingsWorld(t, func(s *namewire.AgentSettings) (string, error) {
		converted++
		if s == nil {
			return "none", nil
		}
		if s.PodZone == "bad" {
			return "", errBad
		}
		return "zone " + s.PodZone, nil
	})
	s1 := &namewire.AgentSettings{PodZone: "z1"}
	steps := []struct {
		name          string
		v             Version
		wantErr       error
		wantSettings  string // of the version served after the step
		wantConverted int
		wantServed    int // versions published so far
		wantPublished int // tables handed over so far, swaps included
	}{
		{name: "first", v: settingsVersion{protoVersion(t, "v1", names(4, 1)), s1},
			wantSettings: "zone z1", wantConverted: 1, wantServed: 1, wantPublished: 1},
		{name: "same settings", v: settingsVersion{protoVersion(t, "v2", names(4, 1)), s1},
			wantSettings: "zone z1", wantConverted: 1, wantServed: 2, wantPublished: 3},
		{name: "bad settings", v: settingsVersion{protoVersion(t, "v3", names(4, 1)), &namewire.AgentSettings{PodZone: "bad"}},
			wantErr: errBad, wantSettings: "zone z1", wantConverted: 2, wantServed: 2, wantPublished: 3},
		{name: "no settings", v: protoVersion(t, "v4", names(4, 1)),
			wantSettings: "none", wantConverted: 3, wantServed: 3, wantPublished: 5},
	}
	for _, st := range steps {
		err := w.in.Apply(SourceControlPlane, st.v)
		if !errors.Is(err, st.wantErr) {
			t.Fatalf("%s: Apply = %v, want %v", st.name, err, st.wantErr)
		}
		cur := w.in.Current()
		if cur.Settings != st.wantSettings || converted != st.wantConverted || len(w.served) != st.wantServed || len(w.published) != st.wantPublished {
			t.Fatalf("%s: serving %q, %d conversions, %d versions and %d tables published; want %q, %d, %d, %d",
				st.name, cur.Settings, converted, len(w.served), len(w.published), st.wantSettings, st.wantConverted, st.wantServed, st.wantPublished)
		}
		if last := w.served[len(w.served)-1]; last != cur || w.published[len(w.published)-1] != cur.Table {
			t.Fatalf("%s: the last version published is not the one served", st.name)
		}
	}
	if got := w.in.m.rejections.WithLabelValues(SourceControlPlane).Value(); got != 0 {
		t.Errorf("%v table rejections, want 0: settings are not the table's", got)
	}
}
