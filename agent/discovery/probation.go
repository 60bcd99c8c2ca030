package discovery

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/meshdns/meshdns/internal/atomicfile"
	"github.com/meshdns/meshdns/internal/namewire"
)

// A version from the control plane becomes the one a restart restores
// (the last known good) only once the agent served it for the probation
// without dying: a version that crashes the agent would otherwise be
// persisted to every state dir and restored after every restart, a crash
// loop in every pod. During the probation the state dir holds, beside the
// state file:
//
//   - goodFile, the state file of the last known good version (a hard
//     link, taken before the first unproven version replaced it);
//   - markerFile, the version on probation and the good one.
//
// A start that finds the marker follows a process that died during the
// probation: it puts goodFile back as the state file and persists the
// version as rejected (rejectedFile), which the stream then NACKs.
const (
	goodFile     = "nametable.good.pb"
	markerFile   = "probation.json"
	rejectedFile = "rejected.json"
)

// marker is markerFile's content.
type marker struct {
	Version string    `json:"version"` // on probation
	Good    string    `json:"good"`    // in goodFile; "" when there is none
	Applied time.Time `json:"applied"`
	// Probation is the process's, which its death is measured against.
	Probation time.Duration `json:"probation"`
	// Stopped: the process shut down cleanly during the probation, so
	// the next start resumes it rather than rejecting the version.
	Stopped bool `json:"stopped,omitempty"`
}

// rejection is rejectedFile's content: a version the agent died running,
// and the reason its NACK gives.
type rejection struct {
	Version string `json:"version"`
	Message string `json:"message"`
}

// probation keeps the marker and the good file of a state dir. Its methods
// do nothing without a state dir: a process that dies loses its memory,
// so there is nothing to restore and nothing to remember. A negative
// period puts no version on probation (each is the last known good once
// applied), but a start still reads what an earlier process left.
type probation struct {
	dir    string // or ""
	period time.Duration
	now    func() time.Time
	log    *slog.Logger

	mu       sync.Mutex // guards following
	cur      *marker    // the version on probation, or nil
	prev     *marker    // cur before begin, restored by cancel
	timer    *time.Timer
	rejected rejection // Version "" when none
}

func (p *probation) path(name string) string { return filepath.Join(p.dir, name) }

// begin puts version on probation before it is applied, so a process that
// dies applying it rejects it at the next start. The state file, of
// version current ("" when unknown), becomes the good file first, unless a
// version on probation replaced it already.
func (p *probation) begin(version, current string) error {
	if p.dir == "" || p.period < 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopTimerLocked()
	p.prev = p.cur
	m := &marker{Version: version, Applied: p.now(), Probation: p.period}
	if p.cur != nil {
		m.Good = p.cur.Good
	} else {
		if err := p.keepGood(); err != nil {
			return err
		}
		if p.exists(goodFile) {
			m.Good = current
			if m.Good == "" {
				// Served from memory (a state write failed): the file
				// holds an older version, named by its head.
				m.Good, _, _ = namewire.FileVersion(p.path(goodFile))
			}
		}
	}
	p.cur = m
	return p.writeMarker(m)
}

// keepGood links the state file as the good file.
func (p *probation) keepGood() error {
	good := p.path(goodFile)
	if err := os.Remove(good); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("keep the last known good table: %w", err)
	}
	err := os.Link(p.path(stateFile), good)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("keep the last known good table: %w", err)
	}
	return nil
}

func (p *probation) exists(name string) bool {
	_, err := os.Stat(p.path(name))
	return err == nil
}

// writeMarker persists m; the rename's directory sync also makes the good
// file's link durable.
func (p *probation) writeMarker(m *marker) error {
	b, err := json.Marshal(m)
	if err == nil {
		err = atomicfile.WriteFile(p.path(markerFile), b, 0o600)
	}
	if err != nil {
		return fmt.Errorf("write probation marker: %w", err)
	}
	return nil
}

// cancel undoes begin for a version that was not applied.
func (p *probation) cancel() {
	if p.dir == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cur, p.prev = p.prev, nil
	if p.cur != nil {
		p.writeMarker(p.cur) // best effort: an old marker names a version not served, harmless
		p.armLocked()
		return
	}
	p.clearLocked()
}

// arm starts the probation of the version begin put on it, now applied.
func (p *probation) arm() {
	if p.dir == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.prev = nil
	p.armLocked()
}

func (p *probation) armLocked() {
	if p.cur == nil {
		return
	}
	m := p.cur
	p.stopTimerLocked()
	p.timer = time.AfterFunc(p.period, func() { p.pass(m) })
}

func (p *probation) stopTimerLocked() {
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
}

// pass makes m's version the last known good: it was served for the
// probation without the process dying.
func (p *probation) pass(m *marker) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != m {
		return // replaced, cancelled or stopped meanwhile
	}
	p.timer = nil
	p.clearLocked()
	p.log.Info("name table passed its probation; restored after a restart from now on", "version", m.Version, "probation", p.period)
}

// clearLocked removes the marker, then the good file: in this order a
// crash between the two leaves a stray good file, which the next start
// removes, never a marker without its good file.
func (p *probation) clearLocked() {
	p.cur = nil
	if err := os.Remove(p.path(markerFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		p.log.Error("end probation", "dir", p.dir, "err", err)
		return
	}
	os.Remove(p.path(goodFile))
}

// stop ends the process's probation cleanly: a version on probation is
// marked stopped, so the next start resumes its probation instead of
// taking a shutdown for a crash.
func (p *probation) stop() {
	if p.dir == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stopTimerLocked()
	if p.cur == nil {
		return
	}
	m := *p.cur
	m.Stopped = true
	p.cur = &m
	if err := p.writeMarker(&m); err != nil {
		p.log.Error("stop probation", "dir", p.dir, "err", err)
	}
}
