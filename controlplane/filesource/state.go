package filesource

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/meshdns/meshdns/internal/atomicfile"
)

// state is what survives a restart in Config.StateDir: the last good
// content of every file, as read, so a control plane that restarts while a
// file is invalid, empty or gone serves what the old process served instead
// of nothing. The raw bytes (not the parsed entries) are kept so the file
// is parsed by the running version's rules.
type state struct {
	// Version of this format; 1.
	Version int `json:"version"`
	// Loaded are the configured paths that had loaded (a folder listed,
	// a file with a good version) when the state was written.
	Loaded []string `json:"loaded"`
	// Files maps a file's path to its last good content.
	Files map[string][]byte `json:"files"`
}

const stateVersion = 1

// stateFile is the state's path: one file per source name, so two file
// sources may share a state directory.
func (s *Source) stateFile() string {
	return filepath.Join(s.cfg.StateDir, "filesource-"+s.cfg.Name+".json")
}

// loadState reads the state; a missing file is no error and returns nil.
func (s *Source) loadState() (*state, error) {
	b, err := os.ReadFile(s.stateFile())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read state: %w", err)
	}
	var st state
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("parse state %s: %w", s.stateFile(), err)
	}
	if st.Version != stateVersion {
		return nil, fmt.Errorf("state %s: version %d, want %d", s.stateFile(), st.Version, stateVersion)
	}
	return &st, nil
}

// saveState writes the state atomically (internal/atomicfile), so a crash
// at any point leaves the old state or the new one whole.
func (s *Source) saveState(st *state) error {
	st.Version = stateVersion
	b, err := json.Marshal(st)
	if err != nil {
		return fmt.Errorf("marshal state: %w", err)
	}
	if err := os.MkdirAll(s.cfg.StateDir, 0o755); err != nil {
		return fmt.Errorf("create state dir: %w", err)
	}
	if err := atomicfile.WriteFile(s.stateFile(), b, 0o600); err != nil {
		return fmt.Errorf("save state: %w", err)
	}
	return nil
}

// under reports whether file is a configured path or inside one.
func (s *Source) under(file string) (string, bool) {
	for _, p := range s.cfg.Paths {
		if file == p || (len(file) > len(p) && file[:len(p)] == p && file[len(p)] == filepath.Separator) {
			return p, true
		}
	}
	return "", false
}

// restore seeds the files' last good versions from the state. Content that
// no longer parses, and files outside the configured paths (the
// configuration changed), are skipped.
func (s *Source) restore(st *state) {
	configured := map[string]bool{}
	for _, p := range s.cfg.Paths {
		configured[p] = true
	}
	for _, p := range st.Loaded {
		if configured[p] {
			s.loaded[p] = true
		}
	}
	n := 0
	for p, data := range st.Files {
		if _, ok := s.under(p); !ok {
			continue
		}
		entries, zones, err := Parse(data)
		if err != nil {
			s.log.Warn("state holds a file that no longer parses; ignoring it", "path", p, "err", err)
			continue
		}
		s.files[p] = &fileState{good: true, goodData: data, goodSum: sum(data), entries: entries, zones: zones}
		n++
	}
	s.log.Info("restored last good entries files from state", "files", n, "state", s.stateFile())
}

// snapshotState is the state for the current last good versions.
func (s *Source) snapshotState() *state {
	st := &state{Files: make(map[string][]byte, len(s.files))}
	for _, p := range s.cfg.Paths {
		if s.loaded[p] {
			st.Loaded = append(st.Loaded, p)
		}
	}
	for p, f := range s.files {
		if f.good {
			st.Files[p] = f.goodData
		}
	}
	return st
}
