package server

import (
	"context"
	"fmt"
	"strings"

	"github.com/meshdns/meshdns/controlplane/agentsettings"
	"github.com/meshdns/meshdns/controlplane/view"
	"github.com/meshdns/meshdns/internal/namewire"
)

// Settings are per agent while a view's table is shared by its namespace:
// each stream composes its agent's settings (at admission, and again
// whenever a part changes) and sends them beside the shared table bytes
// only when they differ from what the agent holds. The version an agent
// holds names both: the view's version, and "+" and the settings' version
// when it has settings (an agent without settings holds the plain view
// version, as before settings existed).

// settingsSep joins a view version and a settings version; neither
// contains it (both are hex).
const settingsSep = "+"

// joinVersion is the version of a table with settings.
func joinVersion(viewID, settings string) string {
	if settings == "" {
		return viewID
	}
	return viewID + settingsSep + settings
}

// splitVersion is joinVersion's inverse.
func splitVersion(v string) (viewID, settings string) {
	viewID, settings, _ = strings.Cut(v, settingsSep)
	return viewID, settings
}

// composeSettings sets a's current settings from the parts' caches; true
// when they changed. The per-agent lock orders the compositions of the
// handler and of watchSettings, so the last stored is the newest.
func (s *Server) composeSettings(a *agent) bool {
	a.composeMu.Lock()
	defer a.composeMu.Unlock()
	next := s.settings.For(a.id, a.features)
	a.mu.Lock()
	defer a.mu.Unlock()
	if next.Version == a.settings.Version && a.settings.Msg != nil {
		return false
	}
	a.settings = next
	return true
}

// watchSettings composes every agent's settings again at each change of a
// part and wakes those whose settings changed; the others are not touched.
// ch is Changed taken before the first stream was admitted, so no change
// after an agent's first composition is missed.
func (s *Server) watchSettings(ctx context.Context, ch <-chan struct{}) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		}
		ch = s.settings.Changed()
		s.mu.Lock()
		as := make([]*agent, 0, len(s.agents))
		for a := range s.agents {
			as = append(as, a)
		}
		s.mu.Unlock()
		n := 0
		for _, a := range as {
			if s.composeSettings(a) {
				n++
				s.wake(a)
			}
		}
		s.m.settingsChanges.Add(float64(n))
	}
}

// encode is p for one agent whose settings are st and who holds the
// settings version held before p: a full table carries the settings
// unless they are empty (a table without settings has none); a delta
// carries them only when they differ from held (present replaces them,
// absent keeps them, even empty ones), and names as its base the version
// the agent holds, settings included. Without settings anywhere, the
// view's bytes go out as they are.
func (s *Server) encode(p *view.Prepared, nonce uint64, st agentsettings.Agent, held string) (*encoded, error) {
	sendSettings := p.Kind == "full" && !st.Empty() || p.Kind != "full" && st.Version != held
	if !sendSettings && st.Version == "" && (p.Kind == "full" || held == "") {
		return newEncoded(p, nonce), nil
	}
	// One buffer for the head, the fields added to the table or delta,
	// and the nonce after them (withSettings); the settings' own bytes
	// are sent from where the agent's settings keep them.
	inner := make([]byte, headRoom, headRoom+len(p.Base)+len(held)+32+tailRoom)
	var s1, s2 []byte
	if p.Kind != "full" && held != "" {
		// A later value of a scalar field replaces the earlier one, in
		// proto and in the agent's decoder.
		inner = namewire.AppendDeltaBase(inner, p.Base, settingsSep, held)
	}
	if sendSettings {
		inner = namewire.AppendSettingsHead(inner, p.Kind == "full", st.Size())
		s1, s2 = st.Encoding()
		s.m.settingsSent.Inc()
	}
	e, err := withSettings(p, nonce, st.Version, inner, s1, s2)
	if err != nil {
		return nil, fmt.Errorf("encode %s of version %s with settings: %w", p.Kind, p.Version.ID, err)
	}
	return e, nil
}
