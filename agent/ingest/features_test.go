package ingest

import (
	"errors"
	"strings"
	"testing"

	"github.com/meshdns/meshdns/internal/namewire"
)

// settingsVersion is a version with settings, as the discovery client
// hands them over.
type settingsVersion struct {
	*wireVersion
	s *namewire.AgentSettings
}

func (v settingsVersion) Settings() *namewire.AgentSettings { return v.s }

// Whatever the source, a version whose settings require a feature the
// agent does not implement is rejected and the table served stays, with
// its settings.
func TestApplyRejectsUnsupportedFeatures(t *testing.T) {
	w := newWorld(t)
	ok := settingsVersion{protoVersion(t, "v1", names(3, 0, "cluster.local")), &namewire.AgentSettings{PodZone: "z1"}}
	if err := w.in.Apply(SourceControlPlane, ok); err != nil {
		t.Fatal(err)
	}
	bad := settingsVersion{protoVersion(t, "v2", names(3, 1, "cluster.local")), &namewire.AgentSettings{Requires: []string{"teleport", "teleport"}}}
	err := w.in.Apply(SourceState, bad)
	if !errors.Is(err, ErrUnsupported) || !strings.HasSuffix(err.Error(), ": teleport") {
		t.Fatalf("Apply(v2) = %v, want ErrUnsupported naming teleport once", err)
	}
	cur := w.in.Current()
	if cur.Version != "v1" || cur.AgentSettings() == nil || cur.AgentSettings().PodZone != "z1" {
		t.Errorf("serving %s with %+v, want v1 with pod zone z1", cur.Version, cur.AgentSettings())
	}
}
