package ingest

import (
	"fmt"
	"strings"

	"github.com/meshdns/meshdns/internal/namewire"
)

// Features are the features of AgentSettings.Requires this agent
// implements, the one list of them: the agent advertises it in its
// identity (AgentIdentity.features) and rejects a version whose settings
// require any other (the control plane's NACK, the previous table kept).
// A version that requires another is never applied in part.
var Features = []string{
	"policy",
	"failing-report", // agent/failing.go
	"forwarding",     // agent/forwarding.go
	"query-log",      // agent/querylogsources.go
	"pod-zone",       // plan.go: the table is built for the zone
}

// Settings is a Version that carries agent settings (the control plane's
// and the state dir's versions do; a table file carries none).
type Settings interface {
	// Settings returns the version's settings, or nil for none.
	Settings() *namewire.AgentSettings
}

// settingsOf returns v's settings, or nil.
func settingsOf(v Version) *namewire.AgentSettings {
	if s, ok := v.(Settings); ok {
		return s.Settings()
	}
	return nil
}

// ErrUnsupported is the error of a version whose settings require a
// feature not in Features.
var ErrUnsupported = fmt.Errorf("settings require features this agent does not implement")

// supported fails settings that require a feature not in Features.
func supported(s *namewire.AgentSettings) error {
	if u := s.Unsupported(Features); len(u) > 0 {
		return fmt.Errorf("%w: %s", ErrUnsupported, strings.Join(u, ", "))
	}
	return nil
}
