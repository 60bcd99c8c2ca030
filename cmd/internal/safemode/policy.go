package safemode

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/meshdns/meshdns/internal/namewire"
)

// StateFile is the agent's persisted table inside its --state-dir (a
// StreamNameTableResponse, see agent/discovery): the last version the
// agent applied, with its settings.
const StateFile = "nametable.pb"

// Policy is what the last applied version says about the pod's DNS policy.
type Policy struct {
	// Enforcing is true when safe mode must refuse every query: the last
	// version carried a policy in enforce mode, or its state could not be
	// read (fail closed: a pod that had a policy must not resolve freely).
	Enforcing bool
	// Why says where the decision came from, for the logs and the probe.
	Why string
}

// ReadPolicy reads the settings of the state file in stateDir. No state
// dir, or no state file in it, is no policy (the agent never applied a
// version with one, or never persisted one). A state file that cannot be
// read or decoded is an enforcing policy: safe mode cannot prove the pod
// had none. It reads only the settings (namewire.FileSettings): the names
// are skipped on the file, never held in memory.
func ReadPolicy(stateDir string) Policy {
	if stateDir == "" {
		return Policy{Why: "no --state-dir: no policy known"}
	}
	path := filepath.Join(stateDir, StateFile)
	s, err := readSettings(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Policy{Why: "no state file: no policy applied"}
	case err != nil:
		return Policy{Enforcing: true, Why: fmt.Sprintf("state unreadable, failing closed: %v", err)}
	case s == nil || s.Policy == nil:
		return Policy{Why: "the last version has no DNS policy"}
	case s.Policy.Mode == namewire.PolicyModeAudit:
		return Policy{Why: "the last version's DNS policy only audits"}
	}
	return Policy{Enforcing: true, Why: "the last version enforces a DNS policy (" + s.Policy.Source + ")"}
}

// readSettings returns the settings of the full table in the state file
// at path, or nil when it has none.
func readSettings(path string) (s *namewire.AgentSettings, err error) {
	defer func() {
		// A decoder bug on a damaged file must not take the supervisor
		// down with the agent: it is an unreadable state.
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("read state %s: %v", path, r)
		}
	}()
	s, err = namewire.FileSettings(path)
	if err != nil {
		return nil, fmt.Errorf("read state %s: %w", path, err)
	}
	return s, nil
}
